package cluster

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The cluster's Service range has no kube-proxy behind it here, and on this
// machine it would route off the host (10.96.0.1 via the default gateway):
// an in-cluster client that dials the kubernetes Service would send its TLS
// out. While any cluster runs, the range is a blackhole route, added by the
// first cluster (unless the host already routes exactly that prefix: then
// it is the host's, and left alone) and removed by the last (shared.go).

func serviceNet() *net.IPNet {
	_, n, _ := net.ParseCIDR(ServiceCIDR)
	return n
}

// serviceRoutes are the main table's IPv4 routes whose destination is
// exactly the Service range.
func serviceRoutes() ([]netlink.Route, error) {
	dst := serviceNet()
	rs, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Dst: dst, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("routes to %s: %w", ServiceCIDR, err)
	}
	return rs, nil
}

// hostRoutesServiceRange reports whether the host had its own route to the
// Service range before the first cluster started (recorded in shared.go).
func hostRoutesServiceRange() bool {
	rs, err := serviceRoutes()
	return err == nil && len(rs) > 0
}

// addServiceBlackhole adds the blackhole route unless one to the range is
// there.
func addServiceBlackhole() error {
	rs, err := serviceRoutes()
	if err != nil {
		return err
	}
	if len(rs) > 0 {
		return nil
	}
	r := &netlink.Route{Dst: serviceNet(), Type: unix.RTN_BLACKHOLE, Table: unix.RT_TABLE_MAIN}
	if err := netlink.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("blackhole route %s: %w", ServiceCIDR, err)
	}
	return nil
}

// delServiceBlackhole removes the blackhole route to the range (only a
// blackhole: never a route someone else made).
func delServiceBlackhole() error {
	rs, err := serviceRoutes()
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Type != unix.RTN_BLACKHOLE {
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("removing blackhole route %s: %w", ServiceCIDR, err)
		}
	}
	return nil
}

// ServiceRangeBlackholed reports whether traffic to the Service range is
// dropped on this host (a blackhole route to exactly ServiceCIDR).
func ServiceRangeBlackholed() bool {
	rs, err := serviceRoutes()
	if err != nil {
		return false
	}
	for _, r := range rs {
		if r.Type == unix.RTN_BLACKHOLE {
			return true
		}
	}
	return false
}
