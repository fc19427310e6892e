package netpol_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

// benchCluster is nsCount namespaces of podsPerNS multi-networked peers
// each, and perNS policies in every namespace, each with an ingress rule
// from a pod selector in its namespace, one from a namespace selector and
// an ipBlock with excepts, and an egress rule to a named port.
func benchCluster(nsCount, podsPerNS, perNS int, selecting bool) *netpoltest.Snapshot {
	s := netpoltest.New()
	for n := range nsCount {
		ns := fmt.Sprintf("ns%03d", n)
		s.AddNamespace(ns, map[string]string{"team": fmt.Sprint(n % 10)})
		for p := range podsPerNS {
			s.AddPeer(&netpol.Peer{Namespace: ns, Name: fmt.Sprintf("pod%03d", p), Labels: map[string]string{"app": fmt.Sprint(p % 7), "tier": "web"},
				NamedPorts: []netpol.NamedPort{{Name: "web", Protocol: netpol.ProtoTCP, Port: 8080}},
				Addrs: map[netpol.Identity][]netip.Addr{{NAD: ns + "/net"}: {netip.AddrFrom4([4]byte{10, byte(n), byte(p / 256), byte(p)}),
					netip.AddrFrom16([16]byte{0xfd, 1: byte(n), 14: byte(p / 256), 15: byte(p)})}}})
		}
		for i := range perNS {
			sel := `{matchLabels: {app: server}}`
			if !selecting {
				sel = `{matchLabels: {app: nobody}}`
			}
			s.AddPolicy(netpoltest.Policy(ns, fmt.Sprintf("p%03d", i), "net", fmt.Sprintf(`
podSelector: %s
policyTypes: [Ingress, Egress]
ingress:
- from: [{podSelector: {matchLabels: {app: "%d"}}}]
  ports: [{port: %d}, {port: 9000, endPort: 9100}]
- from: [{namespaceSelector: {matchLabels: {team: "%d"}}, podSelector: {matchLabels: {tier: web}}}, {ipBlock: {cidr: 192.168.%d.0/24, except: [192.168.%d.7/32]}}]
egress:
- to: [{podSelector: {matchExpressions: [{key: app, operator: In, values: ["%d", "%d"]}]}}]
  ports: [{port: web}]`, sel, i%7, 1000+i, i%10, i%250, i%250, i%7, (i+1)%7)))
		}
	}
	return s
}

func benchTarget(ns string, i int) netpol.Target {
	return netpol.Target{Namespace: ns, Name: fmt.Sprintf("server%d", i), Labels: map[string]string{"app": "server"},
		Interfaces: []netpol.Interface{{IfName: "net1", Identity: netpol.Identity{NAD: ns + "/net"},
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 200, byte(i / 256), byte(i)})}}}}
}

// BenchmarkRender: the attach path's render of one pod (no memo) with no
// policy, with 50 policies in its namespace selecting none of its pods or
// all of them, with 1,000 policies cluster-wide; and one reconcile round
// over 250 local pods sharing a memo (per op: the whole round).
func BenchmarkRender(b *testing.B) {
	for _, c := range []struct {
		name                 string
		nsCount, pods, perNS int
		selecting            bool
		round                int
	}{
		{"no-policy", 20, 50, 0, true, 0},
		{"50-policies-selecting-none", 20, 50, 50, false, 0},
		{"50-policies-selecting-the-pod", 20, 50, 50, true, 0},
		{"1000-policies-cluster-wide", 100, 50, 10, true, 0},
		{"250-pods-shared-memo", 20, 50, 50, true, 250},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := benchCluster(c.nsCount, c.pods, c.perNS, c.selecting)
			b.ReportAllocs()
			if c.round == 0 {
				tg := benchTarget("ns000", 1)
				for b.Loop() {
					netpol.Render(tg, s, netpol.Options{}, nil)
				}
				rs, notes := netpol.Render(tg, s, netpol.Options{}, nil)
				if len(notes) > 0 {
					b.Fatalf("notes: %+v", notes)
				}
				n := 0
				for _, ch := range rs.Chains {
					n += len(ch.Rules)
				}
				b.ReportMetric(float64(n), "rules")
				return
			}
			targets := make([]netpol.Target, c.round)
			for i := range targets {
				targets[i] = benchTarget("ns000", i)
			}
			for b.Loop() {
				memo := netpol.NewMemo()
				for _, tg := range targets {
					netpol.Render(tg, s, netpol.Options{}, memo)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.round), "ns/pod")
		})
	}
}
