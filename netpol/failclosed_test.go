package netpol_test

// Every invalid element and every cap fails closed: an invalid part allows
// nothing, a policy past a per-policy cap isolates and allows nothing, a
// namespace past maxPoliciesPerNamespace or a chain past a per-pod cap or
// the render budget denies all; each says so in a Note that names the
// namespace, the policy and the field.

import (
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/eval"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

// notesOf is every note the world's pods' renders gave, as
// "Reason policy: message".
func (w *world) allNotes() string {
	var b strings.Builder
	for _, k := range w.order {
		w.rules(k)
		for _, n := range w.notes[k] {
			b.WriteString(n.Reason + " " + n.Namespace + "/" + n.Policy + ": " + n.Message + "\n")
		}
	}
	return b.String()
}

func (w *world) expectNotes(want ...string) {
	w.t.Helper()
	got := w.allNotes()
	for _, s := range want {
		if !strings.Contains(got, s) {
			w.t.Errorf("no note with %q in:\n%s", s, got)
		}
	}
	if len(want) == 0 && got != "" {
		w.t.Errorf("notes: %s", got)
	}
}

func TestInvalidElementsAllowNothing(t *testing.T) {
	for _, c := range []struct {
		name, policyFor, spec string
		probes                []string
		notes                 []string
	}{
		{"invalid spec.podSelector isolates every pod of the namespace", "macvlan1", `
podSelector: {matchExpressions: [{key: app, operator: Bogus}]}
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}]}]`,
			[]string{"a>server ko", "a>b ko", "b>c ko", "server>a ko", "c>a ko"},
			[]string{"Invalid inv/p: spec.podSelector:"}},
		{"unknown policyTypes value isolates both directions", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Ingres]
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}]}]`,
			[]string{"a>server ok", "b>server ko", "server>a ko", "a>b ok"},
			[]string{`Invalid inv/p: spec.policyTypes[0]: "Ingres"`}},
		{"lower-case policyTypes is unknown (exact match, as nftables)", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [egress]`,
			[]string{"a>server ko", "server>a ko"},
			[]string{`spec.policyTypes[0]: "egress"`}},
		{"peer with no field", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{}, {podSelector: {matchLabels: {app: a}}}]}]`,
			[]string{"a>server ok", "b>server ko"},
			[]string{"spec.ingress[0].from[0]: no podSelector, namespaceSelector or ipBlock"}},
		{"ipBlock with a selector", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 0.0.0.0/0}, podSelector: {}}]}]`,
			[]string{"a>server ko"},
			[]string{"spec.ingress[0].from[0]: ipBlock together with a selector"}},
		{"bad cidr", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5/24}}]}]`,
			[]string{"a>server ko"},
			[]string{"spec.ingress[0].from[0]: ipBlock.cidr"}},
		{"except outside the cidr makes the whole peer match nothing", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.0/24, except: [2.2.5.12/32, 2.2.6.0/24, 2.2.5.13/32]}}]}]`,
			[]string{"a>server ko", "b>server ko"},
			[]string{"spec.ingress[0].from[0]: ipBlock.except[1]: 2.2.6.0/24 is not inside the cidr 2.2.5.0/24"}},
		{"except of the other family", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.0/24, except: ["::/0"]}}]}]`,
			[]string{"a>server ko"},
			[]string{"ipBlock.except[0]"}},
		{"unparsable except", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.0/24, except: [bogus]}}]}]`,
			[]string{"a>server ko"},
			[]string{"spec.ingress[0].from[0]: ipBlock.except[0]"}},
		{"bad peer selector: only that peer matches nothing", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchExpressions: [{key: app, operator: In}]}}, {podSelector: {matchLabels: {app: a}}}]}]`,
			[]string{"a>server ok", "b>server ko"},
			[]string{"spec.ingress[0].from[0]: podSelector:"}},
		{"bad namespaceSelector", "macvlan1", `
podSelector: {matchLabels: {app: server}}
egress: [{to: [{namespaceSelector: {matchExpressions: [{key: "a b", operator: Exists}]}}]}]`,
			[]string{"server>a ko", "a>server ko"},
			[]string{"spec.egress[0].to[0]: namespaceSelector:"}},
		{"every port entry invalid: the rule allows nothing", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{ports: [{port: 0}, {port: 70000}, {port: 90, endPort: 89}, {port: 90, endPort: 70000}, {protocol: ICMP}, {protocol: tcp}, {endPort: 80}, {port: web, endPort: 90}, {port: "80"}]}]`,
			[]string{"a>server ko", "a>server:90 ko", "a>server:1 ko", "a>server:80/udp ko"},
			[]string{"spec.ingress[0].ports[0]: port 0", "spec.ingress[0].ports[1]: port 70000", "spec.ingress[0].ports[2]: endPort 89",
				"spec.ingress[0].ports[3]: endPort 70000", `spec.ingress[0].ports[4]: protocol "ICMP"`, `spec.ingress[0].ports[5]: protocol "tcp"`,
				"spec.ingress[0].ports[6]: endPort without port", `spec.ingress[0].ports[7]: endPort with the named port "web"`,
				`spec.ingress[0].ports[8]: port "80"`}},
		{"some port entries invalid: the valid ones still allow", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{ports: [{port: 0}, {port: 443}]}]`,
			[]string{"a>server:443 ok", "a>server ko"},
			[]string{"spec.ingress[0].ports[0]"}},
		{"unresolved named port on ingress matches nothing", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{ports: [{port: no-such-port}]}]`,
			[]string{"a>server ko", "a>server:8080 ko"}, nil},
		{"named port to an ipBlock destination matches nothing", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Egress]
egress: [{to: [{ipBlock: {cidr: 2.2.5.0/24}}], ports: [{port: http}]}]`,
			[]string{"server>a ko", "server>a:8080 ko"}, nil},
		{"invalid policy-for entries are skipped, the valid one applies", " a/b/c, NS/x ,macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Ingress]`,
			[]string{"a>server ko", "server>a ok"},
			[]string{`metadata.annotations[k8s.v1.cni.cncf.io/policy-for]: entry 0 "a/b/c"`, `entry 1 "NS/x"`}},
		{"no valid policy-for entry: the policy applies to nothing", "other/macvlan1, a/b/c", `
podSelector: {}
policyTypes: [Ingress, Egress]`,
			[]string{"a>server ok", "server>a ok"},
			[]string{`entry 1 "a/b/c"`}},
		{"no policy-for annotation: the policy applies to nothing", "", `
podSelector: {}
policyTypes: [Ingress, Egress]`,
			[]string{"a>server ok", "server>a ok"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := trio(t, "inv", false)
			for _, k := range []string{"inv/server", "inv/a"} {
				p := w.pod(k)
				p.ports = []netpol.NamedPort{{Name: "http", Protocol: netpol.ProtoTCP, Port: 8080}}
				w.addPod(p)
			}
			w.add(pol("inv", "p", c.policyFor, c.spec))
			w.probe("inv", c.probes...)
			w.expectNotes(c.notes...)
		})
	}
}

// Peers whose labels (or whose namespace's labels) were truncated by the
// cache never match a selector: a missing label could make NotIn match.
func TestTruncatedLabelsNeverMatch(t *testing.T) {
	w := trio(t, "tr", false)
	a := w.pod("tr/a").peer()
	a.LabelsTruncated = true
	w.snap.AddPeer(a)
	w.snap.PutNamespace(&netpol.Namespace{Name: "other", Labels: map[string]string{"team": "x"}, Truncated: true})
	o := mk("other", "o", "tr/macvlan1", "2.2.5.99", "app=o")
	w.addPod(o)
	w.add(pol("tr", "p", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress:
- from: [{podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [c]}]}}]
- from: [{namespaceSelector: {}}]
  ports: [{port: 81}]`))
	w.probe("tr", "a>server ko", "b>server ok", "c>server ko", "b>server:81 ok", "a>server:81 ko", "other/o>server:81 ko")
}

func TestPolicyTypesDefaulting(t *testing.T) {
	for _, c := range []struct{ spec, chains string }{
		{`{podSelector: {}}`, "[ingress]"},
		{`{podSelector: {}, ingress: [{}]}`, "[ingress]"},
		{`{podSelector: {}, egress: [{}]}`, "[ingress egress]"},
		{`{podSelector: {}, egress: []}`, "[ingress]"},
		{`{podSelector: {}, policyTypes: [Egress]}`, "[egress]"},
		{`{podSelector: {}, policyTypes: [Egress], ingress: [{}]}`, "[egress]"},
		{`{podSelector: {}, policyTypes: [Ingress, Egress]}`, "[ingress egress]"},
		{`{podSelector: {}, policyTypes: [Egress, Egress]}`, "[egress]"},
		{`{podSelector: {}, policyTypes: [Sideways]}`, "[ingress egress]"},
	} {
		s := netpoltest.New()
		s.AddPolicy(pol("x", "p", "net", c.spec))
		rs, _ := netpol.Render(goldenTarget(), s, netpol.Options{}, nil)
		var got []string
		for _, ch := range rs.Chains {
			got = append(got, ch.Direction.String())
		}
		if strings.Join(got, " ") != strings.Trim(c.chains, "[]") {
			t.Errorf("%s: chains %v, want %s", c.spec, got, c.chains)
		}
	}
}

// Own addresses pass both ways once known; ND/MLD pass every isolated
// chain; other ICMP follows acceptICMP/acceptICMPv6.
func TestHeadRules(t *testing.T) {
	s := netpoltest.New()
	s.AddPolicy(pol("x", "p", "net", `{podSelector: {}, policyTypes: [Ingress, Egress]}`))
	tg := goldenTarget()
	self := tg.Interfaces[0].IPs[0]
	before := tg
	before.Interfaces = []netpol.Interface{{IfName: "net1", Identity: tg.Interfaces[0].Identity}}
	v6 := netpoltest.Addrs("fe80::1")[0]
	v4 := netpoltest.Addrs("10.0.0.9")[0]
	for _, c := range []struct {
		name string
		tg   netpol.Target
		opts netpol.Options
		pkt  eval.Packet
		want netpol.Verdict
	}{
		// The pod reaches its own addresses over lo (no chain); on net1
		// its own address as the source is a spoof: dropped.
		{"own address spoofed in", tg, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: self, Protocol: netpol.ProtoTCP, Port: 1}, netpol.Drop},
		{"own address out of net1", tg, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Egress, Peer: self, Protocol: netpol.ProtoUDP, Port: 1}, netpol.Drop},
		{"own address before ADD", before, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: self, Protocol: netpol.ProtoTCP, Port: 1}, netpol.Drop},
		{"neighbour solicitation in", tg, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: v6, Protocol: netpol.ProtoICMPv6, ICMPType: 135}, netpol.Accept},
		{"router solicitation out", tg, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Egress, Peer: v6, Protocol: netpol.ProtoICMPv6, ICMPType: 133}, netpol.Accept},
		{"MLDv2 report out", tg, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Egress, Peer: v6, Protocol: netpol.ProtoICMPv6, ICMPType: 143}, netpol.Accept},
		{"echo request v6", tg, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: v6, Protocol: netpol.ProtoICMPv6, ICMPType: 128}, netpol.Drop},
		{"echo request v6, acceptICMPv6", tg, netpol.Options{AcceptICMPv6: true}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: v6, Protocol: netpol.ProtoICMPv6, ICMPType: 128}, netpol.Accept},
		{"echo request v4", tg, netpol.Options{AcceptICMPv6: true}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: v4, Protocol: netpol.ProtoICMP, ICMPType: 8}, netpol.Drop},
		{"echo request v4, acceptICMP", tg, netpol.Options{AcceptICMP: true}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: v4, Protocol: netpol.ProtoICMP, ICMPType: 8}, netpol.Accept},
		{"ND on deny-all", tg, netpol.Options{}, eval.Packet{IfName: "net2", Direction: netpol.Ingress, Peer: v6, Protocol: netpol.ProtoICMPv6, ICMPType: 136}, netpol.Accept},
		{"reply", tg, netpol.Options{}, eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: v4, Protocol: netpol.ProtoTCP, Port: 4000, Established: true}, netpol.Accept},
		{"uncovered interface", tg, netpol.Options{}, eval.Packet{IfName: "net2", Direction: netpol.Ingress, Peer: v4, Protocol: netpol.ProtoTCP, Port: 1}, netpol.Accept},
		{"default network", tg, netpol.Options{}, eval.Packet{IfName: "eth0", Direction: netpol.Ingress, Peer: v4, Protocol: netpol.ProtoTCP, Port: 1}, netpol.Accept},
	} {
		rs, _ := netpol.Render(c.tg, s, c.opts, nil)
		if c.name == "ND on deny-all" {
			rs = netpol.DenyAll(c.tg, c.opts)
		}
		if got := eval.Judge(rs, c.pkt); got != c.want {
			t.Errorf("%s: got %v, want %v\n%s", c.name, got, c.want, rs)
		}
	}
}

// Which interfaces a policy covers: each attachment kind is a NAD
// "ns/name" (annotation, defaultNetworks or claim with a NAD) or a node
// network's name (confDir, nri.conf networks, defaultNetworks or a claim
// naming one); a bare entry matches the policy's namespace's NAD and the
// node network of that name.
func TestChainsPerIdentity(t *testing.T) {
	tg := netpol.Target{Namespace: "ns", Name: "pod", Interfaces: []netpol.Interface{
		{IfName: "net1", Identity: netpol.Identity{NAD: "ns/blue"}},     // annotation
		{IfName: "net2", Identity: netpol.Identity{Node: "blue"}},       // confDir network of the same name
		{IfName: "net3", Identity: netpol.Identity{NAD: "shared/blue"}}, // cross-namespace NAD, e.g. a claim's
		{IfName: "net4", Identity: netpol.Identity{Node: "storage"}},    // defaultNetworks entry "storage"
		{IfName: "net5", Identity: netpol.Identity{NAD: "ns/red"}},      // not named by any policy below
	}}
	for _, c := range []struct{ policyFor, chains string }{
		{"blue", "net1 net2"},
		{"ns/blue", "net1"},
		{"shared/blue", "net3"},
		{"storage", "net4"},
		{"ns/storage", ""},
		{"blue, storage, shared/blue", "net1 net2 net3 net4"},
		{"other/red", ""},
		{"", ""},
	} {
		s := netpoltest.New()
		s.AddPolicy(pol("ns", "p", c.policyFor, `{podSelector: {}}`))
		rs, _ := netpol.Render(tg, s, netpol.Options{}, nil)
		var got []string
		for _, ch := range rs.Chains {
			got = append(got, ch.IfName)
		}
		if strings.Join(got, " ") != c.chains {
			t.Errorf("policy-for %q: chains on %v, want %q", c.policyFor, got, c.chains)
		}
	}
}

// The rules never depend on the pod's own addresses: the render after the
// ADD equals the one before it, so an attach programs one transaction.
func TestRulesDoNotDependOnOwnAddresses(t *testing.T) {
	w := newWorld(t, map[string][]string{"x": nil}, mk("x", "server", "x/net", "10.0.0.1", "app=server"), mk("x", "client", "x/net", "10.0.0.2", "app=client")).
		add(pol("x", "p", "net", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: client}}}]}]`))
	with := w.rules("x/server")
	tg := w.pod("x/server").target()
	for i := range tg.Interfaces {
		tg.Interfaces[i].IPs = nil
	}
	without, _ := netpol.Render(tg, w.snap, w.opts, nil)
	if with.Digest != without.Digest {
		t.Errorf("the pod's own addresses changed its rules:\nwith:\n%s\nwithout:\n%s", with, without)
	}
}
