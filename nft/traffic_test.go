package nft_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

// The topology of the traffic tests: the pod's net1 (where the table
// goes) and a peer, one veth apart, in namespaces of their own.
const (
	podV4, peerV4, otherV4 = "10.77.0.1", "10.77.0.2", "10.77.0.3"
	podV6, peerV6, otherV6 = "fd77::1", "fd77::2", "fd77::3"
)

type pair struct{ pod, peer ns.NetNS }

func newPair(t *testing.T) pair {
	pod, peer := newNS(t), newNS(t)
	link(t, pod, "net1", []string{podV4 + "/24", podV6 + "/64"},
		peer, "eth0", []string{peerV4 + "/24", otherV4 + "/24", peerV6 + "/64", otherV6 + "/64"})
	return pair{pod, peer}
}

// flow is one probe and whether it must get through.
type flow struct {
	fromPod  bool
	proto    string // tcp, udp, sctp
	src, dst string
	port     int
	want     bool
}

func (f flow) String() string {
	dir := "peer→pod"
	if f.fromPod {
		dir = "pod→peer"
	}
	return dir + " " + f.proto + " " + f.src + "→" + f.dst
}

func TestTrafficMatchesTheRuleset(t *testing.T) {
	aps := []ir.AddrPort{
		{Addr: netip.MustParseAddr(peerV4), Protocol: ir.ProtoTCP, Port: 8080},
		{Addr: netip.MustParseAddr(peerV6), Protocol: ir.ProtoUDP, Port: 5353},
	}
	for _, c := range []struct {
		name   string
		chains []ir.Chain
		flows  []flow
	}{{
		name: "accept by address set",
		chains: []ir.Chain{chain("net1", ir.Ingress,
			ir.Rule{Addrs: pfx(peerV4 + "/32"), Verdict: ir.Accept})},
		flows: []flow{
			{proto: "tcp", src: peerV4, dst: podV4, port: 8080, want: true},
			{proto: "udp", src: peerV4, dst: podV4, port: 8080, want: true},
			{proto: "tcp", src: otherV4, dst: podV4, port: 8080, want: false},
			{proto: "udp", src: otherV4, dst: podV4, port: 8080, want: false},
			{fromPod: true, proto: "tcp", src: podV4, dst: otherV4, port: 8080, want: true}, // egress not isolated
		},
	}, {
		name: "port range",
		chains: []ir.Chain{chain("net1", ir.Ingress,
			ir.Rule{Protocol: ir.ProtoTCP, Ports: []ir.PortRange{{First: 6000, Last: 6900}}, Verdict: ir.Accept})},
		flows: []flow{
			{proto: "tcp", src: peerV4, dst: podV4, port: 6666, want: true},
			{proto: "tcp", src: peerV4, dst: podV4, port: 6901, want: false},
			{proto: "tcp", src: peerV4, dst: podV4, port: 5999, want: false},
			{proto: "udp", src: peerV4, dst: podV4, port: 6666, want: false},
		},
	}, {
		name: "protocol only",
		chains: []ir.Chain{chain("net1", ir.Ingress,
			ir.Rule{Protocol: ir.ProtoUDP, Verdict: ir.Accept})},
		flows: []flow{
			{proto: "udp", src: peerV4, dst: podV4, port: 8080, want: true},
			{proto: "tcp", src: peerV4, dst: podV4, port: 8080, want: false},
		},
	}, {
		name:   "replies to the pod's connections pass, new connections in are dropped",
		chains: []ir.Chain{chain("net1", ir.Ingress)},
		flows: []flow{
			{fromPod: true, proto: "tcp", src: podV4, dst: peerV4, port: 8080, want: true},
			{fromPod: true, proto: "udp", src: podV4, dst: peerV4, port: 8080, want: true},
			{proto: "tcp", src: peerV4, dst: podV4, port: 8080, want: false},
			{proto: "udp", src: peerV4, dst: podV4, port: 8080, want: false},
		},
	}, {
		name: "ipv6 with ND on an isolated interface",
		chains: []ir.Chain{
			chain("net1", ir.Ingress, nd,
				ir.Rule{Family: ir.IPv6, Addrs: pfx(peerV6 + "/128"), Protocol: ir.ProtoTCP, Verdict: ir.Accept}),
			chain("net1", ir.Egress, nd),
		},
		flows: []flow{
			{proto: "tcp", src: peerV6, dst: podV6, port: 8080, want: true},
			{proto: "tcp", src: otherV6, dst: podV6, port: 8080, want: false},
			{proto: "udp", src: peerV6, dst: podV6, port: 8080, want: false},
			{fromPod: true, proto: "tcp", src: podV6, dst: peerV6, port: 8080, want: false},
		},
	}, {
		name: "ipv6 without ND: nothing resolves (the ND rule is what makes the case above work)",
		chains: []ir.Chain{chain("net1", ir.Ingress,
			ir.Rule{Family: ir.IPv6, Addrs: pfx(peerV6 + "/128"), Protocol: ir.ProtoTCP, Verdict: ir.Accept})},
		flows: []flow{{proto: "tcp", src: peerV6, dst: podV6, port: 8080, want: false}},
	}, {
		name:   "egress to (address, port) pairs",
		chains: []ir.Chain{chain("net1", ir.Egress, nd, ir.Rule{AddrPorts: aps, Verdict: ir.Accept})},
		flows: []flow{
			{fromPod: true, proto: "tcp", src: podV4, dst: peerV4, port: 8080, want: true},
			{fromPod: true, proto: "tcp", src: podV4, dst: peerV4, port: 8081, want: false},
			{fromPod: true, proto: "udp", src: podV4, dst: peerV4, port: 8080, want: false},
			{fromPod: true, proto: "tcp", src: podV4, dst: otherV4, port: 8080, want: false},
			{fromPod: true, proto: "udp", src: podV6, dst: peerV6, port: 5353, want: true},
			{fromPod: true, proto: "tcp", src: podV6, dst: peerV6, port: 5353, want: false},
			{proto: "tcp", src: peerV4, dst: podV4, port: 8081, want: true}, // ingress not isolated
		},
	}, {
		// Consecutive accepts of one shape become one lookup in a set of
		// (address . protocol . port) ranges: overlapping blocks and ports,
		// both families, two protocols.
		name: "merged accepts",
		chains: []ir.Chain{chain("net1", ir.Ingress, nd,
			ir.Rule{Family: ir.IPv4, Addrs: pfx(peerV4 + "/32"), Protocol: ir.ProtoTCP,
				Ports: []ir.PortRange{{First: 8080, Last: 8080}}, Verdict: ir.Accept},
			ir.Rule{Family: ir.IPv4, Addrs: pfx("10.77.0.0/30"), Protocol: ir.ProtoUDP,
				Ports: []ir.PortRange{{First: 5353, Last: 5360}}, Verdict: ir.Accept},
			ir.Rule{Addrs: pfx(peerV4+"/32", peerV6+"/128"), Protocol: ir.ProtoTCP,
				Ports: []ir.PortRange{{First: 9000, Last: 9100}, {First: 8080, Last: 8080}}, Verdict: ir.Accept},
			ir.Rule{Family: ir.IPv6, Addrs: pfx("fd77::/126"), Protocol: ir.ProtoTCP,
				Ports: []ir.PortRange{{First: 8080, Last: 8080}}, Verdict: ir.Accept})},
		flows: []flow{
			{proto: "tcp", src: peerV4, dst: podV4, port: 8080, want: true},
			{proto: "tcp", src: otherV4, dst: podV4, port: 8080, want: false},
			{proto: "udp", src: otherV4, dst: podV4, port: 5353, want: true},
			{proto: "udp", src: peerV4, dst: podV4, port: 8080, want: false},
			{proto: "tcp", src: peerV4, dst: podV4, port: 5353, want: false},
			{proto: "tcp", src: peerV4, dst: podV4, port: 9050, want: true},
			{proto: "tcp", src: otherV4, dst: podV4, port: 9050, want: false},
			{proto: "tcp", src: peerV6, dst: podV6, port: 9050, want: true},
			{proto: "tcp", src: otherV6, dst: podV6, port: 9050, want: false},
			{proto: "tcp", src: otherV6, dst: podV6, port: 8080, want: true},
			{proto: "udp", src: otherV6, dst: podV6, port: 8080, want: false},
		},
	}, {
		name: "sctp is not tcp",
		chains: []ir.Chain{chain("net1", ir.Ingress,
			ir.Rule{Protocol: ir.ProtoSCTP, Ports: []ir.PortRange{{First: 7777, Last: 7777}}, Verdict: ir.Accept})},
		flows: []flow{
			{proto: "sctp", src: peerV4, dst: podV4, port: 7777, want: true},
			{proto: "sctp", src: peerV4, dst: podV4, port: 7778, want: false},
			{proto: "tcp", src: peerV4, dst: podV4, port: 7777, want: false},
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			pp := newPair(t)
			servers := map[string]bool{}
			for _, f := range c.flows {
				srv := pp.pod
				if f.fromPod {
					srv = pp.peer
				}
				key := fmt.Sprint(f.fromPod, f.proto == "sctp", f.dst, f.port) // serve: TCP and UDP
				if servers[key] {
					continue
				}
				servers[key] = true
				if f.proto == "sctp" {
					if err := sctpListen(t, srv, f.dst, f.port); errors.Is(err, errNoSCTP) {
						t.Skip("SCTP subcase skipped: this kernel has no SCTP (CONFIG_IP_SCTP); the rule is still programmed by TestApplyEveryRuleKindReadsBack")
					} else {
						require.NoError(t, err)
					}
					continue
				}
				serve(t, srv, f.dst, f.port)
			}
			p := programmer(t)
			apply(t, p, pp.pod, ir.Ruleset{Digest: c.name, Chains: c.chains})
			for _, f := range c.flows {
				from := pp.peer
				if f.fromPod {
					from = pp.pod
				}
				// A flow that must pass gets a few tries (a loaded machine can
				// be slower than one probe's wait); one that must not, one.
				got := false
				for try := 0; try < 3 && !got && (try == 0 || f.want); try++ {
					if f.proto == "sctp" {
						got = sctpReaches(t, from, f.src, f.dst, f.port)
					} else {
						got = reaches(t, from, f.proto, f.src, f.dst, f.port)
					}
				}
				assert.Equal(t, f.want, got, "%s:%d", f, f.port)
			}
			// Without the table every flow passes: the probes can fail.
			require.NoError(t, p.Delete(t.Context(), target(t, pp.pod)))
			for _, f := range c.flows {
				if f.proto == "sctp" || f.want {
					continue
				}
				from := pp.peer
				if f.fromPod {
					from = pp.pod
				}
				got := false
				for try := 0; try < 3 && !got; try++ {
					got = reaches(t, from, f.proto, f.src, f.dst, f.port)
				}
				assert.True(t, got, "without rules: %s:%d", f, f.port)
			}
		})
	}
}

// The rules exist before the interface: a Ruleset for net1 applied while
// there is no net1, then the veth is made; its first packet is dropped.
func TestRulesExistBeforeTheInterface(t *testing.T) {
	pod, peer := newNS(t), newNS(t)
	p := programmer(t)
	apply(t, p, pod, ir.Ruleset{Digest: "before", Chains: []ir.Chain{chain("net1", ir.Ingress,
		ir.Rule{Protocol: ir.ProtoTCP, Ports: []ir.PortRange{{First: 8080, Last: 8080}}, Verdict: ir.Accept})}})
	link(t, pod, "net1", []string{podV4 + "/24"}, peer, "eth0", []string{peerV4 + "/24"})
	serve(t, pod, podV4, 9090)
	serve(t, pod, podV4, 8080)
	assert.False(t, reaches(t, peer, "udp", peerV4, podV4, 9090), "the first packet on the new net1 is dropped")
	assert.False(t, reaches(t, peer, "tcp", peerV4, podV4, 9090))
	assert.True(t, reaches(t, peer, "tcp", peerV4, podV4, 8080), "the allowed port passes: the link works")
}
