package netpol_test

// FuzzRender: a tenant's spec, policy-for and labels are hostile input.
// Whatever they are, Render must not panic, must stay within the per-pod
// caps and the budget, must give every chain its head and final drop, and
// must give the same digest twice. Plain `go test` runs the seeds.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/eval"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

func FuzzRender(f *testing.F) {
	for _, s := range []struct {
		spec, policyFor, labels string
		budget                  uint16
	}{
		{`{"podSelector":{}}`, "net", "app=a", 0},
		{`{"podSelector":{"matchLabels":{"app":"a"}},"ingress":[{"from":[{"podSelector":{}}]}]}`, "net, x/net", "app=a", 0},
		{`{"podSelector":{},"policyTypes":["Ingress","Egress"],"ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.1.0.0/16","10.2.0.0/16"]}}]}],"egress":[{"to":[{"namespaceSelector":{}}],"ports":[{"port":"web"},{"port":80,"endPort":90},{"protocol":"SCTP"}]}]}`, "net", "", 0},
		{`{"podSelector":{"matchExpressions":[{"key":"app","operator":"NotIn","values":["b"]}]},"egress":[{"to":[{"ipBlock":{"cidr":"::/0","except":["fd00::/8"]}}]}]}`, "net", "app=a", 5},
		{`{"podSelector":{"matchExpressions":[{"key":"app","operator":"Bogus"}]}}`, "net", "app=a", 0},
		{`{"podSelector":{},"policyTypes":["Sideways"],"ingress":[{"from":[{}],"ports":[{"port":0},{"port":"80"},{"protocol":"ICMP"}]}]}`, "a/b/c,net", "app=a", 0},
		{`{"podSelector":{},"ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["11.0.0.0/8"]},"podSelector":{}}]}]}`, "net", "", 1},
		{`{"podSelector":{},"ingress":[{},{},{},{},{},{},{},{},{}]}`, "net", "", 0},
		{`{"podSelector":{},"ingress":[{"from":[{"ipBlock":{"cidr":"0.0.0.0/0","except":["1.1.1.1/32","3.3.3.3/32","5.5.5.5/32","7.7.7.7/32"]}}]}]}`, "net", "", 0},
		{`{"podSelector":{},"ingress":[{"from":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"y"}},"podSelector":{"matchLabels":{"app":"b"}}}],"ports":[{"port":"web","protocol":"UDP"}]}]}`, "net", "", 0},
		{`{"podSelector":{}}`, strings.Repeat("n,", 100), "", 0},
		{`{"podSelector":{}}`, "", "", 0},
	} {
		f.Add(s.spec, s.policyFor, s.labels, s.budget)
	}
	f.Fuzz(func(t *testing.T, specJSON, policyFor, labels string, budget uint16) {
		var spec networkingv1.NetworkPolicySpec
		if json.Unmarshal([]byte(specJSON), &spec) != nil {
			return
		}
		lim := netpol.Limits{MaxPoliciesPerNamespace: 4, MaxRulesPerPolicy: 8, MaxPeersPerRule: 8, MaxPortsPerRule: 8,
			MaxExceptsPerIPBlock: 8, MaxSelectorTerms: 4, MaxValuesPerTerm: 4, MaxAddressesPerPod: 24, MaxRulesPerPod: 24,
			RenderBudget: int(budget) + 1}
		s := netpoltest.New()
		for i, ns := range []string{"x", "y"} {
			s.AddNamespace(ns, map[string]string{"team": ns})
			for j := range 4 {
				s.AddPeer(&netpol.Peer{Namespace: ns, Name: fmt.Sprintf("p%d", j), Labels: map[string]string{"app": string(rune('a' + j))},
					NamedPorts: []netpol.NamedPort{{Name: "web", Protocol: netpol.ProtoTCP, Port: 8080}, {Name: "web", Protocol: netpol.ProtoUDP, Port: 53}},
					Addrs: map[netpol.Identity][]netip.Addr{{NAD: "x/net"}: {netip.AddrFrom4([4]byte{10, byte(i), 0, byte(j)}),
						netip.AddrFrom16([16]byte{0xfd, 15: byte(16*i + j)})}}})
			}
		}
		s.AddPolicy(&netpol.Policy{Namespace: "x", Name: "fuzz", PolicyFor: policyFor, Spec: &spec})
		s.AddPolicy(&netpol.Policy{Namespace: "x", Name: "second", PolicyFor: policyFor, Spec: &spec})
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = v
		}
		tg := netpol.Target{Namespace: "x", Name: "t", Labels: l,
			NamedPorts: []netpol.NamedPort{{Name: "web", Protocol: netpol.ProtoTCP, Port: 80}},
			Interfaces: []netpol.Interface{{IfName: "net1", Identity: netpol.Identity{NAD: "x/net"}, IPs: netpoltest.Addrs("10.9.0.1")},
				{IfName: "net2", Identity: netpol.Identity{Node: "net"}}}}
		opts := netpol.Options{Limits: lim}
		rs, notes := netpol.Render(tg, s, opts, nil)
		again, _ := netpol.Render(tg, s, opts, netpol.NewMemo())
		if rs.Digest != again.Digest {
			t.Fatalf("two renders differ:\n%s\n%s", rs, again)
		}
		rules, addrs := 0, 0
		for _, ch := range rs.Chains {
			if ch.IfName != "net1" && ch.IfName != "net2" {
				t.Fatalf("chain for %q", ch.IfName)
			}
			n := len(ch.Rules)
			if n < 3 || !ch.Rules[0].Established || ch.Rules[0].Verdict != netpol.Accept || ch.Rules[n-1].Verdict != netpol.Drop {
				t.Fatalf("chain %s %s lacks its head or its drop:\n%s", ch.Direction, ch.IfName, rs)
			}
			deny := ch.Rules[n-1].Comment == "deny all"
			for _, r := range ch.Rules {
				if deny {
					continue
				}
				rules++
				addrs += len(r.Addrs) + len(r.AddrPorts)
				if r.Ports != nil && r.Protocol != netpol.ProtoTCP && r.Protocol != netpol.ProtoUDP && r.Protocol != netpol.ProtoSCTP {
					t.Fatalf("ports without a port protocol: %+v", r)
				}
			}
			// A reply always passes, a packet of another chain's interface
			// is never decided here.
			if eval.Judge(rs, eval.Packet{IfName: ch.IfName, Direction: ch.Direction, Peer: netip.MustParseAddr("192.0.2.1"), Established: true}) != netpol.Accept {
				t.Fatalf("a reply is dropped")
			}
		}
		if rules > lim.MaxRulesPerPod || addrs > lim.MaxAddressesPerPod {
			t.Fatalf("%d rules, %d addresses past the caps (%d, %d):\n%s", rules, addrs, lim.MaxRulesPerPod, lim.MaxAddressesPerPod, rs)
		}
		for _, n := range notes {
			if n.Reason == "" || n.Message == "" {
				t.Fatalf("empty note %+v", n)
			}
		}
	})
}
