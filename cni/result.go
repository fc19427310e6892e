package cni

// What nri-cni keeps of an ADD result: what the record, network-status and
// a DRA claim's status need.

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// Result is what nri-cni keeps of an ADD result.
type Result struct {
	IPs []string // CIDR notation
	Mac string
	// MTU is the interface's MTU as the result reports it (CNI 1.1.0
	// results carry it on interfaces); 0 when it says none.
	MTU int
	DNS types.DNS // as the plugin returned it (often empty)
	// DefaultGateways are the gateways of the result's default routes:
	// network-status's "gateway", as the NPWG client library reads it.
	DefaultGateways []string
	// Raw is the whole result in the current CNI version's form (a DRA
	// claim's status.devices[].data).
	Raw json.RawMessage
}

// summarize extracts the addresses, MAC, MTU and default routes of ifname
// from a result.
func summarize(res types.Result, ifname string) (*Result, error) {
	if res == nil {
		return &Result{}, nil
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("converting CNI result: %w", err)
	}
	raw, err := json.Marshal(cur)
	if err != nil {
		return nil, fmt.Errorf("encoding CNI result: %w", err)
	}
	out := &Result{DNS: cur.DNS, Raw: raw}
	ifIndex := -1
	for i, itf := range cur.Interfaces {
		if itf.Name == ifname && itf.Sandbox != "" {
			ifIndex = i
			out.Mac, out.MTU = itf.Mac, itf.Mtu
		}
	}
	var ips []*current.IPConfig
	for _, ip := range cur.IPs {
		if ip.Interface != nil && ifIndex >= 0 && *ip.Interface != ifIndex {
			continue
		}
		ips = append(ips, ip)
		out.IPs = append(out.IPs, (&net.IPNet{IP: ip.Address.IP, Mask: ip.Address.Mask}).String())
	}
	out.DefaultGateways = defaultGateways(cur.Routes, ips)
	return out, nil
}

// defaultGateways lists the gateways of routes' default routes as the NPWG
// client library (network-attachment-definition-client, CreateNetworkStatus)
// does for network-status's "gateway", so its readers see what Multus would
// write: a route is a default route when its destination is 0.0.0.0 or ::
// (whatever its prefix length, as the library tests it) or absent. One
// deliberate difference: a route without a gateway goes via its family's
// first gateway among the interface's addresses (ips), as the reference
// plugins install it (ipam.ConfigureIface); without one it is a device
// route and lists nothing, where the library writes "<nil>".
func defaultGateways(routes []*types.Route, ips []*current.IPConfig) []string {
	var out []string
	for _, r := range routes {
		if r == nil || !(r.Dst.IP == nil && r.Dst.Mask == nil || r.Dst.IP.Equal(net.IPv4zero) || r.Dst.IP.Equal(net.IPv6zero)) {
			continue
		}
		gw := r.GW
		if gw == nil && r.Dst.IP != nil {
			gw = familyGateway(r.Dst.IP.To4() != nil, ips)
		}
		if gw != nil {
			out = append(out, gw.String())
		}
	}
	return out
}

// familyGateway is the first gateway of the family (IPv4 or not) among ips.
func familyGateway(v4 bool, ips []*current.IPConfig) net.IP {
	for _, ip := range ips {
		if ip.Gateway != nil && (ip.Gateway.To4() != nil) == v4 {
			return ip.Gateway
		}
	}
	return nil
}
