package eval

import (
	"net/netip"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
)

func TestJudge(t *testing.T) {
	pf := netip.MustParsePrefix
	rs := netpol.Ruleset{Chains: []netpol.Chain{{IfName: "net1", Direction: netpol.Ingress, Rules: []netpol.Rule{
		{Established: true, Verdict: netpol.Accept},
		{Family: netpol.IPv6, Protocol: netpol.ProtoICMPv6, ICMPTypes: []uint8{135}, Verdict: netpol.Accept},
		{Family: netpol.IPv4, Addrs: []netip.Prefix{pf("10.0.0.0/24")}, Protocol: netpol.ProtoTCP,
			Ports: []netpol.PortRange{{First: 80, Last: 80}, {First: 6000, Last: 6900}}, Verdict: netpol.Accept},
		{Family: netpol.IPv4, AddrPorts: []netpol.AddrPort{{Addr: netip.MustParseAddr("10.1.0.1"), Protocol: netpol.ProtoUDP, Port: 53}}, Verdict: netpol.Accept},
		{Family: netpol.IPv4, Addrs: []netip.Prefix{pf("10.2.0.0/16")}, Verdict: netpol.Drop},
		{Protocol: netpol.ProtoSCTP, Verdict: netpol.Accept},
	}}}}
	a := netip.MustParseAddr
	for _, c := range []struct {
		name string
		p    Packet
		want netpol.Verdict
	}{
		{"no chain for the interface", Packet{IfName: "net2", Direction: netpol.Ingress, Peer: a("1.1.1.1"), Protocol: netpol.ProtoTCP}, netpol.Accept},
		{"no chain for the direction", Packet{IfName: "net1", Direction: netpol.Egress, Peer: a("1.1.1.1"), Protocol: netpol.ProtoTCP}, netpol.Accept},
		{"established", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("1.1.1.1"), Protocol: netpol.ProtoTCP, Established: true}, netpol.Accept},
		{"ND", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("fe80::1"), Protocol: netpol.ProtoICMPv6, ICMPType: 135}, netpol.Accept},
		{"echo v6", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("fe80::1"), Protocol: netpol.ProtoICMPv6, ICMPType: 128}, netpol.Drop},
		{"in set, port in range", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.0.0.9"), Protocol: netpol.ProtoTCP, Port: 6900}, netpol.Accept},
		{"v4-mapped peer", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("::ffff:10.0.0.9"), Protocol: netpol.ProtoTCP, Port: 80}, netpol.Accept},
		{"port outside", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.0.0.9"), Protocol: netpol.ProtoTCP, Port: 81}, netpol.Drop},
		{"UDP is not TCP", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.0.0.9"), Protocol: netpol.ProtoUDP, Port: 80}, netpol.Drop},
		{"address outside", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.0.1.9"), Protocol: netpol.ProtoTCP, Port: 80}, netpol.Drop},
		{"addr-port pair", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.1.0.1"), Protocol: netpol.ProtoUDP, Port: 53}, netpol.Accept},
		{"addr-port, other port", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.1.0.1"), Protocol: netpol.ProtoUDP, Port: 54}, netpol.Drop},
		{"first match decides", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.2.0.1"), Protocol: netpol.ProtoSCTP}, netpol.Drop},
		{"later rule", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.3.0.1"), Protocol: netpol.ProtoSCTP}, netpol.Accept},
		{"no rule decides: drop", Packet{IfName: "net1", Direction: netpol.Ingress, Peer: a("10.3.0.1"), Protocol: netpol.ProtoTCP}, netpol.Drop},
	} {
		if got := Judge(rs, c.p); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
