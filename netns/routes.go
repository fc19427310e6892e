package netns

import (
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrDefaultRoute wraps every failure to move a pod's default route.
var ErrDefaultRoute = errors.New("setting the default route")

// SetDefaultRoutes makes each gateway the default route of its address
// family in the network namespace at path, through interface ifname: the
// main table's default routes of that family (the runtime's, via eth0) are
// replaced by one via the gateway (the NPWG "default-route" of a secondary
// network). All or nothing: if a route cannot be added (the gateway is not
// reachable on ifname), the routes removed so far are put back and the
// error names the gateway and interface.
func SetDefaultRoutes(path, ifname string, gateways []net.IP) error {
	return ns.WithNetNSPath(path, func(ns.NetNS) error {
		link, err := netlink.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("%w via %s: %w", ErrDefaultRoute, ifname, err)
		}
		var removed, added []netlink.Route
		undo := func() {
			for i := range added {
				_ = netlink.RouteDel(&added[i])
			}
			for i := range removed {
				_ = netlink.RouteAdd(&removed[i])
			}
		}
		for _, gw := range gateways {
			family := netlink.FAMILY_V4
			if gw.To4() == nil {
				family = netlink.FAMILY_V6
			}
			routes, err := netlink.RouteList(nil, family)
			if err != nil {
				undo()
				return fmt.Errorf("%w: listing routes: %w", ErrDefaultRoute, err)
			}
			for _, r := range routes {
				if !isDefault(r) {
					continue
				}
				if err := netlink.RouteDel(&r); err != nil {
					undo()
					return fmt.Errorf("%w: removing the default route via %s: %w", ErrDefaultRoute, r.Gw, err)
				}
				removed = append(removed, r)
			}
			r := netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw, Family: family, Table: unix.RT_TABLE_MAIN}
			if err := netlink.RouteAdd(&r); err != nil {
				undo()
				return fmt.Errorf("%w via %s dev %s: %w (the gateway must be on a subnet of %s)", ErrDefaultRoute, gw, ifname, err, ifname)
			}
			added = append(added, r)
		}
		return nil
	})
}

// isDefault: a main-table route to everything.
func isDefault(r netlink.Route) bool {
	if r.Table != unix.RT_TABLE_MAIN && r.Table != 0 {
		return false
	}
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

// DefaultRoutes lists the gateways and interfaces of the main table's
// default routes in the namespace at path ("10.0.0.1 dev eth0").
func DefaultRoutes(path string) ([]string, error) {
	var out []string
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if !isDefault(r) {
				continue
			}
			name := fmt.Sprint(r.LinkIndex)
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				name = l.Attrs().Name
			}
			out = append(out, fmt.Sprintf("%s dev %s", r.Gw, name))
		}
		return nil
	})
	return out, err
}

// LinkNames lists the names of the interfaces in the network namespace at
// path.
func LinkNames(path string) ([]string, error) {
	var names []string
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		links, err := netlink.LinkList()
		if err != nil {
			return fmt.Errorf("listing interfaces: %w", err)
		}
		for _, l := range links {
			names = append(names, l.Attrs().Name)
		}
		return nil
	})
	return names, err
}
