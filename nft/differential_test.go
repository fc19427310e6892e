package nft_test

// The differential test (design-42 §4.11): a small cluster of pod
// namespaces on one bridge, the scenarios of §2.2 and §2.3 written as
// MultiNetworkPolicy YAML, each pod's Ruleset rendered by netpol and
// programmed by the Programmer, then every probe's real outcome (Go
// dialers inside the namespaces) compared with netpol/eval's verdict on the
// same Rulesets (the client's egress chain, then the server's ingress
// chain, replies through Established). Only _test files import netpol: the
// nft package itself stays on netpol/ir.

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/eval"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

// The cluster: every pod has net1 on the NAD x/net, on one bridge.
var (
	diffNAD = netpol.Identity{NAD: "x/net"}
	// diffNamespaces are the Kubernetes namespaces and their labels.
	diffNamespaces = map[string]map[string]string{"x": {"team": "red"}, "y": {"team": "blue"}}
	httpPort       = netpol.NamedPort{Name: "http", Protocol: netpol.ProtoTCP, Port: 8080}
	diffServer     = diffPod{ns: "x", name: "server", addr: "10.88.0.10", addr6: "fd88::10", labels: map[string]string{"app": "server"},
		ports: []netpol.NamedPort{httpPort, {Name: "dns", Protocol: netpol.ProtoUDP, Port: 5353}}}
	diffClients = []diffPod{
		{ns: "x", name: "a", addr: "10.88.0.1", addr6: "fd88::1", labels: map[string]string{"app": "a", "role": "allowed"}, ports: []netpol.NamedPort{httpPort}},
		{ns: "x", name: "b", addr: "10.88.0.2", addr6: "fd88::2", labels: map[string]string{"app": "b"}, ports: []netpol.NamedPort{httpPort}},
		{ns: "x", name: "c", addr: "10.88.0.3", addr6: "fd88::3", labels: map[string]string{"app": "c"}, ports: []netpol.NamedPort{httpPort}},
		{ns: "y", name: "d", addr: "10.88.0.4", addr6: "fd88::4", labels: map[string]string{"app": "a", "role": "allowed"}, ports: []netpol.NamedPort{httpPort}},
		{ns: "y", name: "e", addr: "10.88.0.5", addr6: "fd88::5", labels: map[string]string{"app": "e"}}, // no named port
	}
	// serverPorts: the server listens on TCP and UDP on each; clients on 8080.
	serverPorts = []int{5353, 6666, 7777, 8080}
)

type diffPod struct {
	ns, name, addr, addr6 string
	labels                map[string]string
	ports                 []netpol.NamedPort
}

// ip is the pod's IPv4 or IPv6 address.
func (p diffPod) ip(v6 bool) netip.Addr {
	if v6 {
		return netip.MustParseAddr(p.addr6)
	}
	return netip.MustParseAddr(p.addr)
}

func (p diffPod) target() netpol.Target {
	return netpol.Target{Namespace: p.ns, Name: p.name, UID: p.ns + "/" + p.name, Labels: p.labels, NamedPorts: p.ports,
		Interfaces: []netpol.Interface{{IfName: "net1", Identity: diffNAD, IPs: []netip.Addr{p.ip(false), p.ip(true)}}}}
}

func (p diffPod) peer() *netpol.Peer {
	return &netpol.Peer{Namespace: p.ns, Name: p.name, UID: p.ns + "/" + p.name, Labels: p.labels, NamedPorts: p.ports,
		Addrs: map[netpol.Identity][]netip.Addr{diffNAD: {p.ip(false), p.ip(true)}}}
}

// diffProbe is one flow: from a pod to a pod's address, proto "tcp", "udp",
// "icmp" (echo, ICMPv6 echo over IPv6) or "sctp", over IPv4 or IPv6.
type diffProbe struct {
	from, to diffPod
	proto    string
	port     int
	v6       bool
}

func (p diffProbe) String() string {
	s := fmt.Sprintf("%s>%s %s %d", p.from.name, p.to.name, p.proto, p.port)
	if p.v6 {
		s += " ipv6"
	}
	return s
}

func (p diffProbe) src() string { return p.from.ip(p.v6).String() }
func (p diffProbe) dst() string { return p.to.ip(p.v6).String() }

// diffScenario is a set of policies and what the scenario is about, as a
// few spot checks ("from>to proto port ok|ko [ipv6]", judged by netpol/eval before
// anything is programmed: the rendering still means what the scenario says).
type diffScenario struct {
	name     string
	policies []*netpol.Policy
	opts     netpol.Options
	icmp     bool // also ping both ways
	self     bool // also the server to its own address (over lo)
	sctp     bool // only SCTP and TCP probes on 7777
	want     []string
}

func pol(ns, name, spec string) *netpol.Policy {
	return netpoltest.Policy(ns, name, "x/net", spec)
}

func diffScenarios() []diffScenario {
	const toServer = "podSelector: {matchLabels: {app: server}}\n"
	return []diffScenario{{
		name: "simple ingress by podSelector",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress:
- from: [{podSelector: {matchLabels: {app: a}}}]`)},
		want: []string{"a>server tcp 8080 ok", "a>server udp 5353 ok", "b>server tcp 8080 ko",
			"d>server tcp 8080 ko", "server>b tcp 8080 ok", "a>server tcp 8080 ok ipv6", "b>server tcp 8080 ko ipv6"},
	}, {
		name: "ingress list",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress:
- from: [{podSelector: {matchLabels: {app: a}}}]
- from: [{podSelector: {matchLabels: {app: c}}}]`)},
		want: []string{"a>server tcp 8080 ok", "c>server udp 8080 ok", "b>server tcp 8080 ko", "server>b udp 8080 ok"},
	}, {
		name: "egress",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
policyTypes: [Egress]
egress:
- to: [{podSelector: {matchLabels: {app: a}}}]`)},
		want: []string{"server>a tcp 8080 ok", "server>b tcp 8080 ko", "server>d udp 8080 ko", "b>server tcp 8080 ok"},
	}, {
		name: "stacked",
		policies: []*netpol.Policy{
			pol("x", "p1", toServer+"ingress: [{from: [{podSelector: {matchLabels: {app: a}}}]}]"),
			pol("x", "p2", toServer+"ingress: [{from: [{podSelector: {matchLabels: {app: b}}}]}]"),
		},
		want: []string{"a>server tcp 8080 ok", "b>server tcp 8080 ok", "c>server tcp 8080 ko"},
	}, {
		name: "ipBlock except, the excepted IP allowed by another policy",
		policies: []*netpol.Policy{
			pol("x", "p1", toServer+`
policyTypes: [Ingress, Egress]
ingress:
- from: [{ipBlock: {cidr: 10.88.0.0/24, except: [10.88.0.2/32, 10.88.0.3/32]}}]
egress:
- to: [{ipBlock: {cidr: 10.88.0.0/29, except: [10.88.0.1/32]}}]`),
			pol("x", "p2", toServer+"ingress: [{from: [{ipBlock: {cidr: 10.88.0.3/32}}]}]"),
		},
		want: []string{"a>server tcp 8080 ok", "b>server tcp 8080 ko", "c>server tcp 8080 ok", "e>server udp 8080 ok",
			"server>a tcp 8080 ko", "server>b tcp 8080 ok", "a>server tcp 8080 ko ipv6", "server>b tcp 8080 ko ipv6"},
	}, {
		name: "ipBlock except over IPv6",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress: [{from: [{ipBlock: {cidr: "fd88::/64", except: ["fd88::2/128"]}}]}]`)},
		want: []string{"a>server tcp 8080 ok ipv6", "b>server tcp 8080 ko ipv6", "a>server tcp 8080 ko", "server>b tcp 8080 ok ipv6"},
	}, {
		name: "port range with endPort",
		policies: []*netpol.Policy{
			pol("x", "p1", toServer+"ingress: [{ports: [{protocol: TCP, port: 6000, endPort: 6900}]}]"),
			pol("x", "p2", `
podSelector: {matchLabels: {app: a}}
policyTypes: [Egress]
egress: [{ports: [{protocol: TCP, port: 6000, endPort: 6700}]}]`),
		},
		want: []string{"b>server tcp 6666 ok", "b>server tcp 8080 ko", "b>server udp 5353 ko", "a>server tcp 6666 ok",
			"a>server udp 5353 ko", "server>a tcp 8080 ok"},
	}, {
		name: "protocol only: TCP allowed, UDP not",
		policies: []*netpol.Policy{
			pol("x", "p1", toServer+"ingress: [{ports: [{protocol: TCP}]}]"),
			pol("x", "p2", `
podSelector: {matchLabels: {app: a}}
policyTypes: [Egress]
egress: [{ports: [{protocol: UDP}]}]`),
		},
		want: []string{"b>server tcp 6666 ok", "b>server udp 8080 ko", "a>server tcp 8080 ko", "a>server udp 8080 ko",
			"server>a udp 8080 ok"},
	}, {
		name: "namespaceSelector",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress: [{from: [{namespaceSelector: {matchLabels: {team: blue}}}]}]`)},
		want: []string{"d>server tcp 8080 ok", "e>server udp 5353 ok", "a>server tcp 8080 ko"},
	}, {
		name: "podSelector AND namespaceSelector (one peer)",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress: [{from: [{namespaceSelector: {matchLabels: {team: blue}}, podSelector: {matchLabels: {role: allowed}}}]}]`)},
		want: []string{"d>server tcp 8080 ok", "e>server tcp 8080 ko", "a>server tcp 8080 ko"},
	}, {
		name: "podSelector OR namespaceSelector (two peers)",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress: [{from: [{namespaceSelector: {matchLabels: {team: blue}}}, {podSelector: {matchLabels: {role: allowed}}}]}]`)},
		want: []string{"d>server tcp 8080 ok", "e>server tcp 8080 ok", "a>server tcp 8080 ok", "b>server tcp 8080 ko"},
	}, {
		name: "namespaceSelector matching no namespace",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress: [{from: [{namespaceSelector: {matchLabels: {foo: bar}}}]}]`)},
		want: []string{"a>server tcp 8080 ko", "d>server udp 8080 ko", "server>a tcp 8080 ok"},
	}, {
		name: "deny all in a namespace",
		policies: []*netpol.Policy{pol("x", "p", `
podSelector: {}
policyTypes: [Ingress, Egress]`)},
		want: []string{"a>server tcp 8080 ko", "d>server tcp 8080 ko", "server>d udp 8080 ko"},
	}, {
		name: "allow all beside a narrower allow",
		policies: []*netpol.Policy{
			pol("x", "p1", toServer+"ingress: [{}]"),
			pol("x", "p2", toServer+"ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 80}]}]"),
		},
		want: []string{"b>server tcp 6666 ok", "e>server udp 5353 ok"},
	}, {
		name: "named ports: ingress on the server's, egress per destination",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
policyTypes: [Ingress, Egress]
ingress: [{ports: [{port: http}, {protocol: UDP, port: dns}]}]
egress: [{ports: [{port: http}]}]`)},
		want: []string{"b>server tcp 8080 ok", "b>server udp 8080 ko", "b>server tcp 6666 ko", "b>server udp 5353 ok",
			"server>a tcp 8080 ok", "server>a udp 8080 ko", "server>e tcp 8080 ko"},
	}, {
		name: "own addresses: the server reaches itself while isolated",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
policyTypes: [Ingress, Egress]`)},
		self: true,
		want: []string{"server>server tcp 8080 ok", "server>server udp 5353 ok", "a>server tcp 8080 ko", "server>a tcp 8080 ko"},
	}, {
		name: "ICMP off: a TCP allowance does not let pings in",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 8080}]}]`)},
		icmp: true,
		want: []string{"a>server tcp 8080 ok", "a>server icmp 0 ko", "b>server icmp 0 ko", "server>a icmp 0 ok",
			"a>server icmp 0 ko ipv6"},
	}, {
		name: "ICMP on: pings pass an isolated interface",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
policyTypes: [Ingress]`)},
		opts: netpol.Options{AcceptICMP: true},
		icmp: true,
		want: []string{"a>server icmp 0 ok", "a>server tcp 8080 ko", "a>server icmp 0 ko ipv6"},
	}, {
		name: "ICMPv6 on: pings pass an isolated interface over IPv6",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
policyTypes: [Ingress]`)},
		opts: netpol.Options{AcceptICMPv6: true},
		icmp: true,
		want: []string{"a>server icmp 0 ok ipv6", "a>server icmp 0 ko", "a>server tcp 8080 ko ipv6"},
	}, {
		name: "SCTP is not TCP",
		policies: []*netpol.Policy{pol("x", "p", toServer+`
ingress: [{ports: [{protocol: SCTP, port: 7777}]}]`)},
		sctp: true,
		want: []string{"a>server sctp 7777 ok", "a>server tcp 7777 ko"},
	}}
}

// The spot checks run without root; the traffic needs it (newNS skips).
func TestDifferentialRealTrafficMatchesEval(t *testing.T) {
	for _, sc := range diffScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			rules := renderAll(t, sc)
			probes := sc.probes()
			checkWant(t, sc, rules)
			cl := newCluster(t, sc.sctp)
			p := programmer(t)
			for _, pod := range cl.pods {
				apply(t, p, cl.netns[pod.name], rules[pod.name])
			}
			// Probes run 8 at a time: a blocked one costs its whole wait.
			got := make([]bool, len(probes))
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for i, pr := range probes {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					// A flow that must pass gets a few tries (scheduling
					// noise); one that must not, one.
					want := judge(rules, pr)
					for try := 0; try < 3 && !got[i] && (try == 0 || want); try++ {
						got[i] = cl.reaches(t, pr)
					}
				}()
			}
			wg.Wait()
			passed := 0
			for i, pr := range probes {
				if want := judge(rules, pr); got[i] != want {
					t.Errorf("%s: real traffic %s, netpol/eval says %s\nrules of %s:\n%s\nrules of %s:\n%s",
						pr, verdictWord(got[i]), verdictWord(want), pr.from.name, rules[pr.from.name], pr.to.name, rules[pr.to.name])
				}
				if got[i] {
					passed++
				}
			}
			t.Logf("%d probes: %d passed, %d blocked", len(probes), passed, len(probes)-passed)
		})
	}
}

func verdictWord(ok bool) string {
	if ok {
		return "passes"
	}
	return "is blocked"
}

// renderAll renders every pod's Ruleset from the scenario's snapshot.
func renderAll(t *testing.T, sc diffScenario) map[string]netpol.Ruleset {
	t.Helper()
	snap := netpoltest.New()
	for name, labels := range diffNamespaces {
		snap.AddNamespace(name, labels)
	}
	pods := append([]diffPod{diffServer}, diffClients...)
	for _, p := range pods {
		snap.AddPeer(p.peer())
	}
	for _, p := range sc.policies {
		snap.AddPolicy(p)
	}
	memo := netpol.NewMemo()
	out := map[string]netpol.Ruleset{}
	for _, p := range pods {
		rs, notes := netpol.Render(p.target(), snap, sc.opts, memo)
		require.Empty(t, notes, "pod %s: the scenario's policies are valid", p.name)
		out[p.name] = rs
	}
	return out
}

// probes: every client to the server and the server to every client, on
// the scenario's protocols and ports.
func (sc diffScenario) probes() []diffProbe {
	var out []diffProbe
	s := diffServer
	for _, c := range diffClients {
		switch {
		case sc.sctp:
			out = append(out, diffProbe{c, s, "sctp", 7777, false}, diffProbe{c, s, "tcp", 7777, false})
		default:
			out = append(out, diffProbe{c, s, "tcp", 8080, false}, diffProbe{c, s, "udp", 8080, false},
				diffProbe{c, s, "tcp", 6666, false}, diffProbe{c, s, "udp", 5353, false},
				diffProbe{s, c, "tcp", 8080, false}, diffProbe{s, c, "udp", 8080, false},
				// IPv6: the families of the rules, ND on isolated interfaces.
				diffProbe{c, s, "tcp", 8080, true}, diffProbe{c, s, "udp", 5353, true}, diffProbe{s, c, "tcp", 8080, true})
		}
		if sc.icmp {
			out = append(out, diffProbe{c, s, "icmp", 0, false}, diffProbe{s, c, "icmp", 0, false},
				diffProbe{c, s, "icmp", 0, true}, diffProbe{s, c, "icmp", 0, true})
		}
	}
	if sc.self {
		out = append(out, diffProbe{s, s, "tcp", 8080, false}, diffProbe{s, s, "udp", 5353, false}, diffProbe{s, s, "tcp", 8080, true})
	}
	return out
}

var diffProtos = map[string]netpol.Protocol{"tcp": netpol.ProtoTCP, "udp": netpol.ProtoUDP, "icmp": netpol.ProtoICMP, "sctp": netpol.ProtoSCTP}

// judge is netpol/eval's verdict on a probe: the request through the
// client's egress chain and the server's ingress chain, the answer back
// through both as established. A pod's own address is reached over lo,
// which no chain filters.
func judge(rules map[string]netpol.Ruleset, pr diffProbe) bool {
	ifname := "net1"
	if pr.from.name == pr.to.name {
		ifname = "lo"
	}
	pkt := eval.Packet{IfName: ifname, Protocol: diffProtos[pr.proto], Port: uint16(pr.port)}
	reply := pkt
	reply.Established, reply.Port = true, 0
	if pr.proto == "icmp" {
		pkt.Port, pkt.ICMPType = 0, 8 // echo request; the reply is type 0
		if pr.v6 {
			pkt.Protocol, pkt.ICMPType = netpol.ProtoICMPv6, 128
		}
		reply.Protocol = pkt.Protocol
	}
	pass := func(rs netpol.Ruleset, d netpol.Direction, peer netip.Addr, p eval.Packet) bool {
		p.Direction, p.Peer = d, peer
		return eval.Judge(rs, p) == netpol.Accept
	}
	client, server := rules[pr.from.name], rules[pr.to.name]
	src, dst := pr.from.ip(pr.v6), pr.to.ip(pr.v6)
	return pass(client, netpol.Egress, dst, pkt) && pass(server, netpol.Ingress, src, pkt) &&
		pass(server, netpol.Egress, src, reply) && pass(client, netpol.Ingress, dst, reply)
}

// checkWant checks the scenario's spot checks against netpol/eval.
func checkWant(t *testing.T, sc diffScenario, rules map[string]netpol.Ruleset) {
	t.Helper()
	byName := map[string]diffPod{diffServer.name: diffServer}
	for _, c := range diffClients {
		byName[c.name] = c
	}
	for _, w := range sc.want {
		f := strings.Fields(w)
		from, to, _ := strings.Cut(f[0], ">")
		v6 := len(f) == 5 && f[4] == "ipv6"
		require.True(t, len(f) == 4 || v6, "spot check %q: want \"from>to proto port ok|ko [ipv6]\"", w)
		port, err := strconv.Atoi(f[2])
		require.NoError(t, err, "spot check %q", w)
		pr := diffProbe{from: byName[from], to: byName[to], proto: f[1], port: port, v6: v6}
		require.NotEmpty(t, pr.from.name+pr.to.name, "spot check %q: unknown pod", w)
		if got := judge(rules, pr); got != (f[3] == "ok") {
			t.Errorf("spot check %q: netpol/eval says %s\nrules of %s:\n%s\nrules of %s:\n%s",
				w, verdictWord(got), from, rules[from], to, rules[to])
		}
	}
}

// cluster is one namespace per pod, each with net1 on a bridge in a
// namespace of its own (nothing is made in the host's namespace).
type cluster struct {
	pods  []diffPod
	netns map[string]ns.NetNS
}

func newCluster(t *testing.T, sctp bool) *cluster {
	t.Helper()
	sw := newNS(t)
	const bridge = "nridiff0"
	require.NoError(t, sw.Do(func(ns.NetNS) error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridge}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		return netlink.LinkSetUp(br)
	}))
	cl := &cluster{pods: append([]diffPod{diffServer}, diffClients...), netns: map[string]ns.NetNS{}}
	for i, p := range cl.pods {
		n := newNS(t)
		cl.netns[p.name] = n
		port := "port" + strconv.Itoa(i)
		link(t, n, "net1", []string{p.addr + "/24", p.addr6 + "/64"}, sw, port, nil)
		require.NoError(t, sw.Do(func(ns.NetNS) error {
			l, err := netlink.LinkByName(port)
			if err != nil {
				return err
			}
			br, err := netlink.LinkByName(bridge)
			if err != nil {
				return err
			}
			return netlink.LinkSetMaster(l, br)
		}))
	}
	server := cl.netns[diffServer.name]
	if sctp {
		if err := sctpListen(t, server, diffServer.addr, 7777); err == errNoSCTP {
			t.Skip("SCTP scenario skipped: this kernel has no SCTP (CONFIG_IP_SCTP)")
		} else {
			require.NoError(t, err)
		}
	}
	for _, port := range serverPorts {
		serve(t, server, diffServer.addr, port)
		serve(t, server, diffServer.addr6, port)
	}
	for _, c := range diffClients {
		serve(t, cl.netns[c.name], c.addr, 8080)
		serve(t, cl.netns[c.name], c.addr6, 8080)
	}
	return cl
}

// reaches runs one probe in the client's namespace.
func (cl *cluster) reaches(t *testing.T, pr diffProbe) bool {
	t.Helper()
	n := cl.netns[pr.from.name]
	switch pr.proto {
	case "icmp":
		return pings(t, n, pr.src(), pr.dst())
	case "sctp":
		return sctpReaches(t, n, pr.src(), pr.dst(), pr.port)
	}
	return reaches(t, n, pr.proto, pr.src(), pr.dst(), pr.port)
}

var pingSeq atomic.Uint32

// pings says whether an ICMP (IPv6: ICMPv6) echo request from src (in n)
// to dst gets its reply.
func pings(tb testing.TB, n ns.NetNS, src, dst string) bool {
	tb.Helper()
	network, request, reply := "ip4:icmp", byte(8), byte(0)
	if netip.MustParseAddr(dst).Is6() {
		network, request, reply = "ip6:ipv6-icmp", 128, 129 // the kernel fills in the checksum
	}
	var ok bool
	require.NoError(tb, n.Do(func(ns.NetNS) error {
		c, err := net.ListenPacket(network, src)
		if err != nil {
			return err
		}
		defer c.Close()
		id, seq := uint16(os.Getpid()), uint16(pingSeq.Add(1))
		msg := []byte{request, 0, 0, 0, 0, 0, 0, 0, 'n', 'r', 'i'}
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], seq)
		if request == 8 {
			binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg))
		}
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(dst)}); err != nil {
			return nil
		}
		_ = c.SetReadDeadline(time.Now().Add(probeWait))
		buf := make([]byte, 1500)
		for {
			k, from, err := c.ReadFrom(buf) // without the IP header
			if err != nil {
				return nil // no reply: blocked
			}
			if k >= 8 && buf[0] == reply && from.String() == dst &&
				binary.BigEndian.Uint16(buf[4:]) == id && binary.BigEndian.Uint16(buf[6:]) == seq {
				ok = true
				return nil
			}
		}
	}))
	return ok
}

func icmpChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
