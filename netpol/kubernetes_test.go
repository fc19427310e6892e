package netpol_test

// Kubernetes NetworkPolicy's e2e behaviours (design-42 §2.3), written anew
// as reachability matrices over namespaces x, y, z with pods a, b, c, all
// on one NAD that every policy names in policy-for. Rows are clients,
// columns servers, both in the order x/a x/b x/c y/a y/b y/c z/a z/b z/c;
// "." is reachable, "X" blocked, "-" a pod to itself (that goes over lo,
// which is never filtered).

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
)

const kubeNAD = "netpol/macvlan"

func kubeWorld(t testing.TB) *world {
	w := newWorld(t, map[string][]string{"x": {"ns=x"}, "y": {"ns=y"}, "z": {"ns=z"}})
	for i, ns := range []string{"x", "y", "z"} {
		for j, name := range []string{"a", "b", "c"} {
			p := mk(ns, name, kubeNAD, fmt.Sprintf("10.42.%d.%d fd42::%d:%d", i+1, j+1, i+1, j+1), "pod="+name)
			for _, port := range []uint16{80, 81} {
				for _, pr := range []string{"tcp", "udp", "sctp"} {
					p.ports = append(p.ports, netpol.NamedPort{Name: fmt.Sprintf("serve-%d-%s", port, pr), Protocol: protos[pr], Port: port})
				}
			}
			w.addPod(p)
		}
	}
	return w
}

// kpol is a policy of namespace ns on kubeNAD.
func kpol(ns, name, spec string) *netpol.Policy { return pol(ns, name, kubeNAD, spec) }

var allOpen = grid(func(string, string) bool { return false })

var kubePods = []string{"x/a", "x/b", "x/c", "y/a", "y/b", "y/c", "z/a", "z/b", "z/c"}

// grid is the matrix where exactly the pairs blocked says are blocked.
func grid(blocked func(from, to string) bool) string {
	var b strings.Builder
	for _, from := range kubePods {
		for _, to := range kubePods {
			switch {
			case from == to:
				b.WriteByte('-')
			case blocked(from, to):
				b.WriteByte('X')
			default:
				b.WriteByte('.')
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// intoXA: x/a's ingress is closed but from the clients listed.
func intoXA(allowed ...string) string {
	return grid(func(from, to string) bool { return to == "x/a" && !slices.Contains(allowed, from) })
}

// outOfXA: x/a's egress is closed but to the servers listed.
func outOfXA(allowed ...string) string {
	return grid(func(from, to string) bool { return from == "x/a" && !slices.Contains(allowed, to) })
}

func TestKubernetesBehaviours(t *testing.T) {
	tcp, udp, sctp := netpol.ProtoTCP, netpol.ProtoUDP, netpol.ProtoSCTP
	type check struct {
		proto netpol.Protocol
		port  uint16
		grid  string
	}
	for _, c := range []struct {
		name     string
		policies []*netpol.Policy
		checks   []check
	}{
		{"no policy", nil, []check{{tcp, 80, allOpen}}},
		{"default-deny-ingress", []*netpol.Policy{kpol("x", "deny", `{podSelector: {}, policyTypes: [Ingress]}`)}, []check{{tcp, 80, `
			- X X . . . . . .
			X - X . . . . . .
			X X - . . . . . .
			X X X - . . . . .
			X X X . - . . . .
			X X X . . - . . .
			X X X . . . - . .
			X X X . . . . - .
			X X X . . . . . -`}}},
		{"default-deny-all", []*netpol.Policy{kpol("x", "deny", `{podSelector: {}, policyTypes: [Ingress, Egress]}`)}, []check{{tcp, 80, `
			- X X X X X X X X
			X - X X X X X X X
			X X - X X X X X X
			X X X - . . . . .
			X X X . - . . . .
			X X X . . - . . .
			X X X . . . - . .
			X X X . . . . - .
			X X X . . . . . -`}}},
		{"allow by podSelector within the namespace", []*netpol.Policy{kpol("x", "b-to-a", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]`)}, []check{{tcp, 80, intoXA("x/b")}}},
		{"allow from all namespaces", []*netpol.Policy{kpol("x", "all-ns", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {}}]}]`)}, []check{{tcp, 80, allOpen}}},
		{"only from a namespace, matchLabels", []*netpol.Policy{kpol("x", "from-y", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {matchLabels: {ns: "y"}}}]}]`)}, []check{{tcp, 80, intoXA("y/a", "y/b", "y/c")}}},
		{"only from namespaces NotIn [y]", []*netpol.Policy{kpol("x", "not-y", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: ns, operator: NotIn, values: ["y"]}]}}]}]`)},
			[]check{{tcp, 80, intoXA("x/b", "x/c", "z/a", "z/b", "z/c")}}},
		{"only from kubernetes.io/metadata.name In [z]", []*netpol.Policy{kpol("x", "from-z", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [z]}]}}]}]`)},
			[]check{{tcp, 80, intoXA("z/a", "z/b", "z/c")}}},
		{"podSelector OR namespaceSelector", []*netpol.Policy{kpol("x", "or", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}, {namespaceSelector: {matchLabels: {ns: "y"}}}]}]`)},
			[]check{{tcp, 80, intoXA("x/b", "y/a", "y/b", "y/c")}}},
		{"podSelector AND namespaceSelector", []*netpol.Policy{kpol("x", "and", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{podSelector: {matchLabels: {pod: b}}, namespaceSelector: {matchLabels: {ns: "y"}}}]}]`)},
			[]check{{tcp, 80, intoXA("y/b")}}},
		{"multiple selectors In [b, c]", []*netpol.Policy{kpol("x", "in", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{podSelector: {matchExpressions: [{key: pod, operator: In, values: [b, c]}]},
                   namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: ["y", z]}]}}]}]`)},
			[]check{{tcp, 80, intoXA("y/b", "y/c", "z/b", "z/c")}}},
		{"ports: TCP 81 only", []*netpol.Policy{kpol("x", "tcp81", `
podSelector: {matchLabels: {pod: a}}
ingress: [{ports: [{port: 81}]}]`)}, []check{{tcp, 81, allOpen}, {tcp, 80, intoXA()}, {udp, 81, intoXA()}}},
		{"ports: UDP 81 only", []*netpol.Policy{kpol("x", "udp81", `
podSelector: {matchLabels: {pod: a}}
ingress: [{ports: [{protocol: UDP, port: 81}]}]`)}, []check{{udp, 81, allOpen}, {udp, 80, intoXA()}, {tcp, 81, intoXA()}}},
		{"ports: SCTP 81 only, never TCP", []*netpol.Policy{kpol("x", "sctp81", `
podSelector: {matchLabels: {pod: a}}
ingress: [{ports: [{protocol: SCTP, port: 81}]}]`)}, []check{{sctp, 81, allOpen}, {tcp, 81, intoXA()}, {udp, 81, intoXA()}}},
		{"stacked policies with overlapping selectors, per port", []*netpol.Policy{
			kpol("x", "y-80", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {matchLabels: {ns: "y"}}}], ports: [{port: 80}]}]`),
			kpol("x", "yz-81", `
podSelector: {matchExpressions: [{key: pod, operator: Exists}]}
ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: ns, operator: In, values: ["y", z]}]}}], ports: [{port: 81}]}]`)},
			[]check{{tcp, 80, `
			- X X . . . . . .
			X - X . . . . . .
			X X - . . . . . .
			. X X - . . . . .
			. X X . - . . . .
			. X X . . - . . .
			X X X . . . - . .
			X X X . . . . - .
			X X X . . . . . -`}, {tcp, 81, `
			- X X . . . . . .
			X - X . . . . . .
			X X - . . . . . .
			. . . - . . . . .
			. . . . - . . . .
			. . . . . - . . .
			. . . . . . - . .
			. . . . . . . - .
			. . . . . . . . -`}}},
		{"allow-all ingress", []*netpol.Policy{kpol("x", "all", `{podSelector: {}, ingress: [{}]}`)}, []check{{tcp, 80, allOpen}, {udp, 81, allOpen}}},
		{"named port on ingress", []*netpol.Policy{kpol("x", "named", `
podSelector: {matchLabels: {pod: a}}
ingress: [{ports: [{port: serve-81-tcp}]}]`)}, []check{{tcp, 81, allOpen}, {tcp, 80, intoXA()}, {udp, 81, intoXA()}}},
		{"named port from a namespace", []*netpol.Policy{kpol("x", "named-y", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {matchLabels: {ns: "y"}}}], ports: [{protocol: UDP, port: serve-80-udp}]}]`)},
			[]check{{udp, 80, intoXA("y/a", "y/b", "y/c")}, {udp, 81, intoXA()}, {tcp, 80, intoXA()}}},
		{"named port on egress, resolved per destination", []*netpol.Policy{kpol("x", "egress-named", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress: [{ports: [{port: serve-80-tcp}]}]`)}, []check{{tcp, 80, allOpen}, {tcp, 81, outOfXA()}}},
		{"deny egress of one pod", []*netpol.Policy{kpol("x", "a-egress", `{podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress]}`)}, []check{{tcp, 80, outOfXA()}}},
		{"deny egress of a namespace", []*netpol.Policy{kpol("y", "egress", `{podSelector: {}, policyTypes: [Egress]}`)}, []check{{tcp, 80, `
			- . . . . . . . .
			. - . . . . . . .
			. . - . . . . . .
			X X X - X X X X X
			X X X X - X X X X
			X X X X X - X X X
			. . . . . . - . .
			. . . . . . . - .
			. . . . . . . . -`}}},
		{"ingress and egress together", []*netpol.Policy{kpol("x", "both", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Ingress, Egress]
ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]
egress: [{to: [{podSelector: {matchLabels: {pod: c}}}]}]`)}, []check{{tcp, 80, `
			- X . X X X X X X
			. - . . . . . . .
			X . - . . . . . .
			X . . - . . . . .
			X . . . - . . . .
			X . . . . - . . .
			X . . . . . - . .
			X . . . . . . - .
			X . . . . . . . -`}}},
		{"client-side egress deny wins over the server's allow", []*netpol.Policy{
			kpol("x", "a-no-egress", `{podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress]}`),
			kpol("y", "allow-all-in", `{podSelector: {}, ingress: [{}]}`)}, []check{{tcp, 80, outOfXA()}}},
		{"protocol-only: TCP yes, UDP no", []*netpol.Policy{kpol("x", "tcp", `
podSelector: {matchLabels: {pod: a}}
ingress: [{ports: [{protocol: TCP}]}]`)}, []check{{tcp, 80, allOpen}, {tcp, 81, allOpen}, {udp, 80, intoXA()}}},
		{"allow-all ingress and egress win over narrower policies", []*netpol.Policy{
			kpol("x", "deny", `{podSelector: {}, policyTypes: [Ingress, Egress]}`),
			kpol("x", "narrow", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]`),
			kpol("x", "open", `{podSelector: {}, policyTypes: [Ingress, Egress], ingress: [{}], egress: [{}]}`)},
			[]check{{tcp, 80, allOpen}}},
		{"egress to a /32 CIDR", []*netpol.Policy{kpol("x", "cidr", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress: [{to: [{ipBlock: {cidr: 10.42.2.2/32}}]}]`)}, []check{{tcp, 80, outOfXA("y/b")}}},
		{"egress to a CIDR with an except", []*netpol.Policy{kpol("x", "except", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress: [{to: [{ipBlock: {cidr: 10.42.0.0/16, except: [10.42.2.2/32]}}]}]`)}, []check{{tcp, 80, grid(func(from, to string) bool { return from == "x/a" && to == "y/b" })}}},
		{"an IP in cidr and except is allowed by another policy", []*netpol.Policy{
			kpol("x", "except", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress: [{to: [{ipBlock: {cidr: 10.42.0.0/16, except: [10.42.2.2/32]}}]}]`),
			kpol("x", "just-y-b", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Egress]
egress: [{to: [{ipBlock: {cidr: 10.42.2.2/32}}]}]`)}, []check{{tcp, 80, allOpen}}},
		{"ingress and egress independent", []*netpol.Policy{kpol("x", "in-only", `{podSelector: {matchLabels: {pod: a}}, policyTypes: [Ingress]}`)},
			[]check{{tcp, 80, intoXA()}}},
		{"UDP-only allow blocks TCP", []*netpol.Policy{kpol("x", "udp", `
podSelector: {matchLabels: {pod: a}}
ingress: [{ports: [{protocol: UDP, port: 80}]}]`)}, []check{{udp, 80, allOpen}, {tcp, 80, intoXA()}, {sctp, 80, intoXA()}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := kubeWorld(t).add(c.policies...)
			for _, ch := range c.checks {
				w.expectMatrix(c.name, ch.proto, ch.port, ch.grid)
			}
		})
	}
}

// Updates: the same memo across snapshot versions must never serve a peer
// set of an older version.
func TestKubernetesUpdates(t *testing.T) {
	t.Run("allow-all becomes deny-all", func(t *testing.T) {
		w := kubeWorld(t).add(kpol("x", "p", `{podSelector: {matchLabels: {pod: a}}, ingress: [{}]}`))
		w.expectMatrix("allow-all", netpol.ProtoTCP, 80, allOpen)
		w.add(kpol("x", "p", `{podSelector: {matchLabels: {pod: a}}, policyTypes: [Ingress]}`))
		w.expectMatrix("deny-all", netpol.ProtoTCP, 80, intoXA())
	})
	t.Run("namespace relabelled into the selector", func(t *testing.T) {
		w := kubeWorld(t).add(kpol("x", "p", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {matchLabels: {team: blue}}}]}]`))
		w.expectMatrix("before", netpol.ProtoTCP, 80, intoXA())
		w.snap.AddNamespace("z", map[string]string{"ns": "z", "team": "blue"})
		w.expectMatrix("after", netpol.ProtoTCP, 80, intoXA("z/a", "z/b", "z/c"))
	})
	t.Run("peer relabelled into the selector", func(t *testing.T) {
		w := kubeWorld(t).add(kpol("x", "p", `
podSelector: {matchLabels: {pod: a}}
ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {role: client}}}]}]`))
		w.expectMatrix("before", netpol.ProtoTCP, 80, intoXA())
		p := w.pod("y/c")
		p.labels = map[string]string{"pod": "c", "role": "client"}
		w.addPod(p)
		w.expectMatrix("after", netpol.ProtoTCP, 80, intoXA("y/c"))
	})
	t.Run("target relabelled into isolation", func(t *testing.T) {
		w := kubeWorld(t).add(kpol("x", "p", `{podSelector: {matchLabels: {isolated: "true"}}, policyTypes: [Ingress]}`))
		w.expectMatrix("before", netpol.ProtoTCP, 80, allOpen)
		p := w.pod("x/a")
		p.labels = map[string]string{"pod": "a", "isolated": "true"}
		w.addPod(p)
		w.expectMatrix("after", netpol.ProtoTCP, 80, intoXA())
	})
	t.Run("policy deleted: enforcement stops", func(t *testing.T) {
		w := kubeWorld(t).add(kpol("x", "p", `{podSelector: {}, policyTypes: [Ingress, Egress]}`))
		if w.rules("x/a").Empty() {
			t.Fatal("x/a is not isolated")
		}
		w.snap.DeletePolicy("x", "p")
		w.expectMatrix("after delete", netpol.ProtoTCP, 80, allOpen)
		w.expectTables()
	})
}
