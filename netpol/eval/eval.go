// Package eval judges packets against a netpol.Ruleset the way the
// programmed nftables table would: the chain of the packet's interface and
// direction, its rules in order, the first match decides. It is for tests
// (reachability tables without a kernel); it does no I/O.
package eval

import (
	"net/netip"
	"slices"

	"github.com/nri-cni/nri-cni/netpol"
)

// Packet is what a chain sees of one packet. Peer is the source on ingress
// and the destination on egress; Port is the destination port (TCP, UDP,
// SCTP); Established says conntrack has it as established or related.
type Packet struct {
	IfName      string
	Direction   netpol.Direction
	Peer        netip.Addr
	Protocol    netpol.Protocol
	Port        uint16
	ICMPType    uint8
	Established bool
}

// Judge returns the verdict of the first rule of the packet's chain that
// matches. With no chain for that interface and direction the packet is
// not filtered (Accept); a chain that no rule decides drops it.
func Judge(rs netpol.Ruleset, p Packet) netpol.Verdict {
	for i := range rs.Chains {
		c := &rs.Chains[i]
		if c.IfName != p.IfName || c.Direction != p.Direction {
			continue
		}
		for j := range c.Rules {
			if Matches(&c.Rules[j], p) {
				return c.Rules[j].Verdict
			}
		}
		return netpol.Drop
	}
	return netpol.Accept
}

// Matches says whether every field the rule sets matches the packet.
func Matches(r *netpol.Rule, p Packet) bool {
	peer := p.Peer.Unmap()
	switch {
	case r.Established && !p.Established:
		return false
	case r.Family == netpol.IPv4 && !peer.Is4(), r.Family == netpol.IPv6 && !peer.Is6():
		return false
	case r.Addrs != nil && !slices.ContainsFunc(r.Addrs, func(pf netip.Prefix) bool { return pf.Contains(peer) }):
		return false
	case r.Protocol != netpol.ProtoAny && r.Protocol != p.Protocol:
		return false
	case r.Ports != nil && !slices.ContainsFunc(r.Ports, func(pr netpol.PortRange) bool { return p.Port >= pr.First && p.Port <= pr.Last }):
		return false
	case r.ICMPTypes != nil && !slices.Contains(r.ICMPTypes, p.ICMPType):
		return false
	case r.AddrPorts != nil && !slices.Contains(r.AddrPorts, netpol.AddrPort{Addr: peer, Protocol: p.Protocol, Port: p.Port}):
		return false
	}
	return true
}
