package netpol_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

// A policy past a per-policy cap (in the cache: Oversize; or found at
// render time) isolates what it selects in both directions and allows
// nothing, even where its rules would allow.
func TestPerPolicyCapsAreOversize(t *testing.T) {
	small := netpol.Limits{MaxRulesPerPolicy: 2, MaxPeersPerRule: 2, MaxPortsPerRule: 2, MaxExceptsPerIPBlock: 1,
		MaxSelectorTerms: 2, MaxValuesPerTerm: 2}
	for _, c := range []struct{ name, spec, note string }{
		{"rules", `
podSelector: {matchLabels: {app: server}}
ingress: [{}, {}]
egress: [{}]`, "spec: 3 ingress and egress rules (at most 2)"},
		{"peers", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {}}, {podSelector: {}}, {podSelector: {}}]}]`, "spec.ingress[0].from: 3 peers (at most 2)"},
		{"ports", `
podSelector: {matchLabels: {app: server}}
egress: [{ports: [{port: 1}, {port: 2}, {port: 3}]}]`, "spec.egress[0].to.ports: 3 entries (at most 2)"},
		{"excepts", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.0/24, except: [2.2.5.1/32, 2.2.5.2/32]}}]}]`, "spec.ingress[0].from[0].ipBlock.except: 2 entries (at most 1)"},
		{"podSelector terms", `
podSelector: {matchLabels: {app: server, x: "1"}, matchExpressions: [{key: y, operator: DoesNotExist}]}
ingress: [{}]`, "spec.podSelector: 3 terms (at most 2)"},
		{"podSelector values", `
podSelector: {matchExpressions: [{key: app, operator: In, values: [server, a, b]}]}
ingress: [{}]`, "spec.podSelector.matchExpressions[0].values: 3 values (at most 2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := trio(t, "cap", false).add(pol("cap", "big", "macvlan1", c.spec))
			w.opts.Limits = small
			// Oversize selects every pod of the namespace, in both directions.
			w.probe("cap", "a>server ko", "server>a ko", "a>b ko", "b>c ko")
			w.expectNotes("Oversize cap/big: " + c.note)
		})
	}
	t.Run("marked Oversize by the cache", func(t *testing.T) {
		w := trio(t, "cap", false)
		w.add(&netpol.Policy{Namespace: "cap", Name: "big", PolicyFor: "macvlan1", Oversize: true})
		w.probe("cap", "a>server ko", "server>a ko")
		w.expectNotes("Oversize cap/big")
	})
	t.Run("a peer selector past the caps matches nothing, the policy stays", func(t *testing.T) {
		w := trio(t, "cap", false).add(pol("cap", "p", "macvlan1", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: a, x: "1", y: "2"}}}, {podSelector: {matchLabels: {app: b}}}]}]`))
		w.opts.Limits = small
		w.probe("cap", "a>server ko", "b>server ok", "server>a ok", "a>c ok")
		w.expectNotes("Invalid cap/p: spec.ingress[0].from[0]: podSelector: 3 terms (at most 2)")
	})
}

func TestMaxPoliciesPerNamespace(t *testing.T) {
	w := trio(t, "many", false)
	for i := range 3 {
		w.add(pol("many", fmt.Sprintf("p%d", i), "macvlan1", `{podSelector: {matchLabels: {app: server}}, ingress: [{}]}`))
	}
	w.opts.Limits = netpol.Limits{MaxPoliciesPerNamespace: 2}
	// Every pod of the namespace, selected or not, is closed on every
	// interface; other namespaces are not.
	w.probe("many", "a>server ko", "a>b ko", "server>c ko")
	for _, k := range []string{"many/server", "many/a"} {
		if rs := w.rules(k); rs.Digest != netpol.DenyAll(w.pod(k).target(), w.opts).Digest {
			t.Errorf("%s: not deny-all:\n%s", k, rs)
		}
	}
	w.expectNotes("CapExceeded many/p2: namespace many has 3 MultiNetworkPolicies (at most 2)")
	if strings.Contains(w.allNotes(), "many/p1") {
		t.Errorf("a policy within the cap is named: %s", w.allNotes())
	}
}

// Per-pod caps: the chain that would overflow becomes deny-all, naming the
// policy contributing most; the other chains render normally.
func TestPerPodCaps(t *testing.T) {
	srv := mk("pp", "server", "pp/big", "2.2.5.1", "app=server")
	srv.ifaces = append(srv.ifaces, iface{name: "net2", id: netpol.Identity{NAD: "pp/small"}, ips: netpoltest.Addrs("2.3.0.1")})
	cl := mk("pp", "client", "pp/big", "2.2.5.2", "app=client")
	cl.ifaces = append(cl.ifaces, iface{name: "net2", id: netpol.Identity{NAD: "pp/small"}, ips: netpoltest.Addrs("2.3.0.2")})
	policies := []*netpol.Policy{
		pol("pp", "few", "big", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{ipBlock: {cidr: 2.2.5.0/24, except: [2.2.5.128/25]}}]}]`),
		pol("pp", "many", "big", `
podSelector: {matchLabels: {app: server}}
ingress:
- from: [{ipBlock: {cidr: 2.2.5.0/24, except: [2.2.5.1/32, 2.2.5.3/32, 2.2.5.5/32, 2.2.5.7/32, 2.2.5.9/32]}}]
- from: [{ipBlock: {cidr: 2.2.6.1/32}}]
- from: [{ipBlock: {cidr: 2.2.6.2/32}}]
- from: [{ipBlock: {cidr: 2.2.6.3/32}}]`),
		pol("pp", "on-small", "small", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {matchLabels: {app: client}}}]}]`),
	}
	for _, c := range []struct {
		name   string
		limits netpol.Limits
		note   string
	}{
		{"addresses", netpol.Limits{MaxAddressesPerPod: 12}, "CapExceeded pp/many: pod pp/server net1 ingress: 15 addresses in the pod's table (maxAddressesPerPod 12)"},
		{"rules", netpol.Limits{MaxRulesPerPod: 7}, "CapExceeded pp/many: pod pp/server net1 ingress: 8 rules in the pod's table (maxRulesPerPod 7)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, map[string][]string{"pp": nil}, srv, cl).add(policies...)
			w.probe("pp", "client>server ok", "client>server@pp/small ok")
			w.opts.Limits = c.limits
			w.probe("pp", "client>server ko", "client>server@pp/small ok")
			w.expectNotes(c.note)
			rs := w.rules("pp/server")
			if n := len(rs.Chains[0].Rules); n != 3 || !strings.Contains(rs.String(), `drop comment "deny all"`) {
				t.Errorf("net1 ingress is not deny-all:\n%s", rs)
			}
			rules, addrs := 0, 0
			for _, ch := range rs.Chains {
				for _, r := range ch.Rules {
					rules++
					addrs += len(r.Addrs) + len(r.AddrPorts)
				}
			}
			if lim := c.limits.MaxRulesPerPod; lim > 0 && rules > lim {
				t.Errorf("%d rules > %d", rules, lim)
			}
			if lim := c.limits.MaxAddressesPerPod; lim > 0 && addrs > lim {
				t.Errorf("%d addresses > %d", addrs, lim)
			}
		})
	}
}

// The render budget bounds selector evaluations: past it, the unfinished
// chains deny all.
func TestRenderBudget(t *testing.T) {
	w := kubeWorld(t).add(kpol("x", "p", `
podSelector: {matchLabels: {pod: a}}
policyTypes: [Ingress, Egress]
ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {pod: b}}}]}]
egress: [{to: [{namespaceSelector: {}}]}]`))
	w.probe("x", "y/b>a ok", "a>z/c ok")
	// 1 selection + 3 namespaces + 9 pods for the ingress peers fits in 13.
	w.opts.Limits = netpol.Limits{RenderBudget: 13}
	w.memo = netpol.NewMemo()
	w.probe("x", "y/b>a ok", "a>z/c ko")
	w.expectNotes("BudgetExceeded x/: pod x/a: rendering took more than 13 selector evaluations")
	rs := w.rules("x/a")
	if len(rs.Chains) != 2 || len(rs.Chains[1].Rules) != 3 {
		t.Errorf("egress is not deny-all:\n%s", rs)
	}
	w.opts.Limits = netpol.Limits{RenderBudget: 1}
	w.probe("x", "y/b>a ko", "a>z/c ko")
}
