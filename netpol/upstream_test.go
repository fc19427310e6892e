package netpol_test

// The upstream daemons' end-to-end cases (design-42 §2.2), written anew as
// reachability tables: the same pods, policies and OK/KO assertions, judged
// on the rendered rules without a kernel.

import (
	"net/netip"

	"github.com/nri-cni/nri-cni/netpol/eval"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

var pol = netpoltest.Policy

// trio is a server and clients a, b, c on one NAD of namespace ns.
func trio(t *testing.T, ns string, v6 bool) *world {
	nad := ns + "/macvlan1"
	ip := func(n string) string {
		if v6 {
			return "2001:db8:1::" + n
		}
		return "2.2.5." + n
	}
	return newWorld(t, map[string][]string{ns: nil},
		mk(ns, "server", nad, ip("1"), "app=server"),
		mk(ns, "a", nad, ip("11"), "app=a"),
		mk(ns, "b", nad, ip("12"), "app=b"),
		mk(ns, "c", nad, ip("13"), "app=c"))
}

func TestUpstreamSimpleIngress(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		w := trio(t, "simple", v6).add(pol("simple", "allow-a", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Ingress]
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}]}]`))
		w.expectTables("simple/server")
		w.probe("simple", "a>server ok", "b>server ko", "c>server ko", "server>a ok", "server>b ok", "a>b ok")
	}
}

func TestUpstreamSimpleIngressList(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		w := trio(t, "list", v6).add(pol("list", "allow-a-c", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Ingress]
ingress:
- from: [{podSelector: {matchLabels: {app: a}}}]
- from: [{podSelector: {matchLabels: {app: c}}}]`))
		w.probe("list", "a>server ok", "c>server ok", "b>server ko", "server>a ok", "server>b ok", "server>c ok")
	}
}

func TestUpstreamSimpleEgress(t *testing.T) {
	// nftables' manifest says policyTypes [Egress]: ingress stays open.
	w := trio(t, "egress", false).add(pol("egress", "to-a", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Egress]
egress: [{to: [{podSelector: {matchLabels: {app: a}}}]}]`))
	w.probe("egress", "server>a ok", "server>b ko", "a>server ok", "b>server ok")
	// iptables' manifest has no policyTypes: by nftables' defaulting (ours)
	// that isolates ingress too, which is where the two daemons differ.
	w = trio(t, "egress", false).add(pol("egress", "to-a", "macvlan1", `
podSelector: {matchLabels: {app: server}}
egress: [{to: [{podSelector: {matchLabels: {app: a}}}]}]`))
	w.probe("egress", "server>a ok", "server>b ko", "a>server ko", "b>server ko")
}

func TestUpstreamSimpleEgressList(t *testing.T) {
	w := trio(t, "egl", false).add(pol("egl", "to-a-c", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Egress]
egress:
- to: [{podSelector: {matchLabels: {app: a}}}]
- to: [{podSelector: {matchLabels: {app: c}}}]`))
	w.probe("egl", "server>a ok", "server>c ok", "server>b ko", "b>server ok")
}

func TestUpstreamStacked(t *testing.T) {
	w := trio(t, "stacked", false).add(
		pol("stacked", "from-a", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}]}]`),
		pol("stacked", "from-b", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: b}}}]}]`))
	w.probe("stacked", "a>server ok", "b>server ok", "c>server ko")
}

func TestUpstreamIPBlock(t *testing.T) {
	for name, policies := range map[string][]*netpol.Policy{
		"one rule, two blocks": {pol("ipb", "p", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.11/32}}, {ipBlock: {cidr: 2.2.5.12/32}}]}]`)},
		"two rules": {pol("ipb", "p", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress:
- from: [{ipBlock: {cidr: 2.2.5.11/32}}]
- from: [{ipBlock: {cidr: 2.2.5.12/32}}]`)},
		"two policies": {pol("ipb", "p1", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.11/32}}]}]`), pol("ipb", "p2", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.12/32}}]}]`)},
	} {
		t.Run(name, func(t *testing.T) {
			trio(t, "ipb", false).add(policies...).probe("ipb", "a>server ok", "b>server ok", "c>server ko")
		})
	}
}

func TestUpstreamPortRange(t *testing.T) {
	w := trio(t, "ports", false).add(pol("ports", "a-ranges", "macvlan1", `
podSelector: {matchLabels: {app: a}}
policyTypes: [Ingress, Egress]
egress: [{ports: [{port: 5000, endPort: 5900}]}]
ingress: [{ports: [{port: 6000, endPort: 6900}]}]`))
	w.probe("ports", "a>b:5555 ok", "a>b:6666 ko", "b>a:5555 ko", "b>a:6666 ok",
		"a>b:5000 ok", "a>b:5900 ok", "a>b:5901 ko", "b>a:6900 ok", "b>a:5999 ko", "a>b:5555/udp ko")
}

func TestUpstreamProtocolOnlyPorts(t *testing.T) {
	w := trio(t, "proto", false).add(pol("proto", "a-protocols", "macvlan1", `
podSelector: {matchLabels: {app: a}}
policyTypes: [Ingress, Egress]
egress: [{ports: [{protocol: TCP}]}]
ingress: [{ports: [{protocol: UDP}]}]`))
	w.probe("proto", "a>b:5555/tcp ok", "a>b:5555/udp ko", "b>a:5555/tcp ko", "b>a:5555/udp ok", "b>a:53/udp ok", "a>b:1/tcp ok")
}

func TestUpstreamIngressNamespaceSelectorNoPods(t *testing.T) {
	w := trio(t, "nsnone", false).add(pol("nsnone", "from-foo", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{namespaceSelector: {matchLabels: {foo: bar}}}]}]`))
	w.probe("nsnone", "a>server ko", "b>server ko", "c>server ko", "server>a ok", "server>c ok")
}

func TestUpstreamBond(t *testing.T) {
	// pod-a's bond0 is built from two macvlan links; policy-for names only
	// the bond's NAD, so the links are not covered.
	a := mk("bond", "a", "bond/bond-nad", "2.2.6.1", "app=a")
	a.ifaces = append(a.ifaces,
		iface{name: "net1", id: netpol.Identity{NAD: "bond/macvlan1"}, ips: netpoltest.Addrs("2.2.7.1")},
		iface{name: "net2", id: netpol.Identity{NAD: "bond/macvlan2"}, ips: netpoltest.Addrs("2.2.8.1")})
	a.ifaces[0].name = "bond0"
	c := mk("bond", "c", "bond/bond-nad", "2.2.6.3", "app=c")
	c.ifaces = append(c.ifaces, iface{name: "net1", id: netpol.Identity{NAD: "bond/macvlan1"}, ips: netpoltest.Addrs("2.2.7.3")})
	w := newWorld(t, map[string][]string{"bond": nil}, a, mk("bond", "b", "bond/bond-nad", "2.2.6.2", "app=b"), c).add(
		pol("bond", "bond-policy", "bond-nad", `
podSelector: {matchLabels: {app: a}}
policyTypes: [Ingress, Egress]
ingress: [{from: [{podSelector: {matchLabels: {app: b}}}]}]
egress: [{to: [{podSelector: {matchLabels: {app: c}}}]}]`))
	w.probe("bond", "b>a ok", "c>a ko", "a>b ko", "a>c ok", "c>a@bond/macvlan1 ok", "a>c@bond/macvlan1 ok")
	for _, ch := range w.rules("bond/a").Chains {
		if ch.IfName != "bond0" {
			t.Errorf("chain %s %s: only bond0 is covered", ch.Direction, ch.IfName)
		}
	}
}

func TestUpstreamAcceptAllWithSpecificAllow(t *testing.T) {
	w := trio(t, "acc", false).add(
		pol("acc", "allow-all", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: []}]`),
		pol("acc", "allow-a-80", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 80}]}]`))
	w.probe("acc", "a>server ok", "a>server:8080 ok", "b>server ok", "c>server:22 ok", "b>server:53/udp ok")
}

func TestUpstreamDenyAllWithSpecificAllow(t *testing.T) {
	w := trio(t, "deny", false).add(
		pol("deny", "deny-all", "macvlan1", `
podSelector: {}
policyTypes: [Ingress]
ingress: []`),
		pol("deny", "allow-a-80", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{protocol: TCP, port: 80}]}]`))
	w.probe("deny", "a>server ok", "a>server:8080 ko", "b>server ko", "c>server ko", "server>a ko", "a>server:80/udp ko")
}

func TestUpstreamAdvancedIPBlock(t *testing.T) {
	ns, nad := "adv", "adv/macvlan1"
	w := newWorld(t, map[string][]string{ns: nil},
		mk(ns, "server", nad, "2.2.8.1", "app=server"),
		mk(ns, "p11", nad, "2.2.8.11"), mk(ns, "p12", nad, "2.2.8.12"), mk(ns, "p13", nad, "2.2.8.13"),
		mk(ns, "p14", nad, "2.2.8.14"), mk(ns, "p20", nad, "2.2.8.20"), mk(ns, "out", nad, "2.2.9.20"),
	).add(pol(ns, "block", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Ingress, Egress]
ingress: [{from: [{ipBlock: {cidr: 2.2.8.0/24, except: [2.2.8.13/32, 2.2.8.14/32]}}]}]
egress: [{to: [{ipBlock: {cidr: 2.2.8.0/24, except: [2.2.8.13/32, 2.2.8.14/32]}}]}]`))
	w.probe(ns, "p11>server ok", "p12>server ok", "p20>server ok", "p13>server ko", "p14>server ko", "out>server ko",
		"server>p11 ok", "server>p13 ko", "server>p14 ko", "server>out ko")
}

func TestUpstreamComplexPortSpecifications(t *testing.T) {
	ns, nad := "cps", "cps/macvlan1"
	w := newWorld(t, map[string][]string{ns: nil},
		mk(ns, "server", nad, "2.2.10.1", "app=server"),
		mk(ns, "allowed", nad, "2.2.10.2", "role=allowed"),
		mk(ns, "blocked", nad, "2.2.10.3", "role=blocked"),
	).add(pol(ns, "ports", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Ingress, Egress]
ingress:
- from: [{podSelector: {matchLabels: {role: allowed}}}]
  ports: [{protocol: TCP, port: 80}, {protocol: TCP, port: 443}, {protocol: TCP, port: 22}, {protocol: UDP, port: 53}]
egress:
- to: [{podSelector: {matchLabels: {role: allowed}}}]
  ports: [{protocol: TCP, port: 80}]`))
	w.probe(ns, "allowed>server:80 ok", "allowed>server:443 ok", "allowed>server:22 ok", "allowed>server:53/udp ok",
		"allowed>server:8080 ko", "allowed>server:53/tcp ko", "allowed>server:80/udp ko",
		"blocked>server:80 ko", "blocked>server:53/udp ko",
		"server>allowed:80 ok", "server>allowed:443 ko", "server>blocked:80 ko")
}

func TestUpstreamCustomRules(t *testing.T) {
	ns, nad := "custom", "custom/macvlan1"
	w := newWorld(t, map[string][]string{ns: nil},
		mk(ns, "server", nad, "2.2.11.1", "app=server"),
		mk(ns, "a", nad, "2.2.11.2", "app=a"),
		mk(ns, "b", nad, "2.2.11.3", "app=b"),
		mk(ns, "mgmt", nad, "192.168.100.7", "app=mgmt"),
	).add(pol(ns, "allow-a-8080", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 8080}]}]`))
	w.opts.Allow = []netpol.Allow{
		{Direction: netpol.Ingress, Protocol: netpol.ProtoTCP, Ports: []netpol.PortRange{{First: 9999, Last: 9999}}},
		{Direction: netpol.Ingress, CIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.100.0/24")}},
	}
	w.probe(ns, "a>server:9999 ok", "b>server:9999 ok", "a>server:8080 ok", "b>server:8080 ko", "a>server:80 ko",
		"b>server:9999/udp ko", "mgmt>server:80 ok", "mgmt>server:5353/udp ok")
}

func TestUpstreamEdgeCasesValidation(t *testing.T) {
	w := trio(t, "edge", false).add(
		pol("edge", "nobody-pod", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: nonexistent}}}]}]`),
		pol("edge", "nobody-ns", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{namespaceSelector: {matchLabels: {name: nonexistent}}}]}]`),
		pol("edge", "a-to-nobody", "macvlan1", `
podSelector: {matchLabels: {app: a}}
policyTypes: [Egress]
egress: [{to: [{podSelector: {matchLabels: {app: nonexistent}}}]}]`),
		pol("edge", "bad-ports", "macvlan1", `
podSelector: {matchLabels: {app: b}}
ingress: [{ports: [{protocol: ICMP, port: 80}, {port: 0}, {port: 70000}, {port: 90, endPort: 89}, {port: http, endPort: 90}]}]`))
	w.probe("edge", "a>server ko", "b>server ko", "c>server ko", "a>b ko", "a>c ko",
		"c>b ko", "c>b:90 ko", "c>b:1 ko", "c>b:80/udp ko", "server>c ok")
}

func TestUpstreamMixedSelectors(t *testing.T) {
	nad := "mixed/macvlan1"
	w := newWorld(t, map[string][]string{"mixed": {"env=production"}, "staging": {"env=staging"}, "dev": {"env=dev"}},
		mk("mixed", "server", nad, "2.2.12.1", "app=server"),
		mk("staging", "a", nad, "2.2.12.2", "role=allowed"), // staging ∧ allowed
		mk("dev", "b", nad, "2.2.12.3", "role=other"),       // neither
		mk("staging", "c", nad, "2.2.12.4", "role=other"),   // staging only
		mk("mixed", "d", nad, "2.2.12.5", "role=allowed"),   // allowed, the policy's namespace
		mk("dev", "e", nad, "2.2.12.6", "role=allowed"),     // allowed, another namespace
	).add(
		pol("mixed", "and", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress:
- from: [{namespaceSelector: {matchLabels: {env: staging}}, podSelector: {matchLabels: {role: allowed}}}]`),
		pol("mixed", "or", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress:
- from: [{namespaceSelector: {matchLabels: {env: staging}}}, {podSelector: {matchLabels: {role: allowed}}}]`),
		pol("mixed", "egress-and", "macvlan1", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Egress]
egress:
- to: [{namespaceSelector: {matchLabels: {env: staging}}, podSelector: {matchLabels: {role: other}}}]`))
	// A podSelector-only peer means the policy's namespace (nftables;
	// iptables would let dev/e in too).
	w.probe("mixed", "staging/a>server ok", "dev/b>server ko", "staging/c>server ok", "d>server ok", "dev/e>server ko",
		"server>staging/c ok", "server>staging/a ko", "server>dev/b ko", "server>d ko")
}

func TestUpstreamMultiNamespaceMultinet(t *testing.T) {
	// One subnet, three NADs in three namespaces; the policy in ns-a lists
	// all three, so peers' addresses on any of them count.
	ns := map[string][]string{"ns-a": nil, "ns-b": nil, "ns-c": nil}
	w := newWorld(t, ns,
		mk("ns-a", "server", "ns-a/net", "2.2.13.1", "app=server"),
		mk("ns-b", "pod-1", "ns-b/net", "2.2.13.2", "app=pod-1"),
		mk("ns-b", "pod-2", "ns-b/net", "2.2.13.3", "app=pod-2"),
		mk("ns-c", "pod-3", "ns-c/net", "2.2.13.4", "app=pod-3"),
		mk("ns-b", "pod-4", "ns-b/other", "2.2.13.5", "app=pod-1"), // on a network the policy does not list
	).add(pol("ns-a", "multi", "net, ns-b/net ,ns-c/net", `
podSelector: {matchLabels: {app: server}}
policyTypes: [Ingress, Egress]
ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ns-b}}, podSelector: {matchLabels: {app: pod-1}}}]}]
egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ns-b}}, podSelector: {matchLabels: {app: pod-2}}}]}]`))
	// The server's own interface is on ns-a/net; the clients on other NADs
	// of the same subnet reach it over that wire.
	cross := func(from, to string, port uint16) bool {
		c, s := w.pod(from), w.pod(to)
		out := eval.Packet{IfName: "net1", Direction: netpol.Egress, Peer: s.ifaces[0].ips[0], Protocol: netpol.ProtoTCP, Port: port}
		in := eval.Packet{IfName: "net1", Direction: netpol.Ingress, Peer: c.ifaces[0].ips[0], Protocol: netpol.ProtoTCP, Port: port}
		return eval.Judge(w.rules(from), out) == netpol.Accept && eval.Judge(w.rules(to), in) == netpol.Accept
	}
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"ns-b/pod-1", "ns-a/server", true}, {"ns-b/pod-2", "ns-a/server", false}, {"ns-c/pod-3", "ns-a/server", false},
		{"ns-b/pod-4", "ns-a/server", false},
		{"ns-a/server", "ns-b/pod-2", true}, {"ns-a/server", "ns-b/pod-1", false}, {"ns-a/server", "ns-c/pod-3", false},
		// Allowed by the absence of a policy on either end.
		{"ns-c/pod-3", "ns-b/pod-2", true}, {"ns-b/pod-1", "ns-c/pod-3", true},
	} {
		if got := cross(c.from, c.to, 80); got != c.ok {
			t.Errorf("%s→%s: got %v, want %v\n%s", c.from, c.to, got, c.ok, w.rules("ns-a/server"))
		}
	}
	w.expectTables("ns-a/server")
}

func TestUpstreamProductionLike(t *testing.T) {
	nad := "prod/tenant-net"
	w := newWorld(t, map[string][]string{"prod": {"env=production"}, "monitoring": {"env=ops"}, "dev": {"env=development"}},
		mk("prod", "frontend", nad, "10.20.0.10", "tier=frontend"),
		mk("prod", "backend", nad, "10.20.0.20", "tier=backend"),
		mk("prod", "database", nad, "10.20.0.30", "tier=database"),
		mk("monitoring", "prometheus", nad, "10.20.0.40", "app=prometheus"),
		mk("dev", "devpod", nad, "10.20.0.50", "app=dev"),
	).add(
		pol("prod", "frontend", "tenant-net", `
podSelector: {matchLabels: {tier: frontend}}
ingress: [{ports: [{port: 80}, {port: 443}]}]`),
		pol("prod", "backend", "tenant-net", `
podSelector: {matchLabels: {tier: backend}}
policyTypes: [Ingress, Egress]
ingress:
- from: [{podSelector: {matchLabels: {tier: frontend}}}]
  ports: [{port: 8080}]
- from: [{namespaceSelector: {matchLabels: {env: ops}}}]
  ports: [{port: 9090}]
egress:
- to: [{podSelector: {matchLabels: {tier: database}}}]
  ports: [{port: 5432}]`),
		pol("prod", "database", "tenant-net", `
podSelector: {matchLabels: {tier: database}}
policyTypes: [Ingress, Egress]
ingress:
- from: [{podSelector: {matchLabels: {tier: backend}}}]
  ports: [{port: 5432}]
- from: [{namespaceSelector: {matchLabels: {env: ops}}}]
  ports: [{port: 9187}]`))
	w.probe("prod",
		"dev/devpod>frontend:80 ok", "monitoring/prometheus>frontend:443 ok", "backend>frontend:22 ko",
		"frontend>backend:8080 ok", "dev/devpod>backend:8080 ko", "frontend>backend:5432 ko",
		"monitoring/prometheus>backend:9090 ok", "backend>database:5432 ok", "frontend>database:5432 ko",
		"monitoring/prometheus>database:9187 ok", "monitoring/prometheus>database:5432 ko",
		"backend>frontend:80 ko", "database>backend:8080 ko")
}
