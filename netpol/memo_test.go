package netpol_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

// roundWorld is n local pods of namespace "local" and peers in three other
// namespaces, with policies whose rules have peers: the shape of one
// reconcile round.
func roundWorld(n int) (*netpoltest.Snapshot, []netpol.Target, int) {
	s := netpoltest.New()
	for i, ns := range []string{"local", "p1", "p2", "p3"} {
		s.AddNamespace(ns, map[string]string{"tier": fmt.Sprint(i % 2)})
		for j := range 20 {
			s.AddPeer(&netpol.Peer{Namespace: ns, Name: fmt.Sprintf("peer-%d", j), Labels: map[string]string{"app": fmt.Sprint(j % 4)},
				Addrs: map[netpol.Identity][]netip.Addr{{NAD: "local/net"}: {netip.AddrFrom4([4]byte{10, byte(i), 1, byte(j)})}}})
		}
	}
	s.AddPolicy(netpoltest.Policy("local", "a", "net", `
podSelector: {}
policyTypes: [Ingress, Egress]
ingress:
- from: [{podSelector: {matchLabels: {app: "1"}}}]
- from: [{namespaceSelector: {matchLabels: {tier: "1"}}}, {ipBlock: {cidr: 192.168.0.0/16, except: [192.168.3.0/24]}}]
egress:
- to: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: app, operator: In, values: ["2", "3"]}]}}]`))
	s.AddPolicy(netpoltest.Policy("local", "b", "local/net", `
podSelector: {matchExpressions: [{key: role, operator: Exists}]}
ingress: [{from: [{podSelector: {}}], ports: [{port: 80}]}]`))
	var targets []netpol.Target
	for i := range n {
		targets = append(targets, netpol.Target{Namespace: "local", Name: fmt.Sprintf("pod-%d", i),
			Labels:     map[string]string{"role": fmt.Sprint(i % 3)},
			Interfaces: []netpol.Interface{{IfName: "net1", Identity: netpol.Identity{NAD: "local/net"}, IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 9, byte(i / 256), byte(i)})}}}})
	}
	// Rules with peers: a's ingress[0], ingress[1], egress[0]; b's ingress[0].
	return s, targets, 4
}

func TestMemoComputesEachPeerSetOncePerVersion(t *testing.T) {
	s, targets, rulesWithPeers := roundWorld(250)
	memo := netpol.NewMemo()
	want := map[string]string{}
	for _, tg := range targets {
		rs, _ := netpol.Render(tg, s, netpol.Options{}, memo)
		plain, _ := netpol.Render(tg, s, netpol.Options{}, nil)
		if rs.Digest != plain.Digest {
			t.Fatalf("%s: memo changes the result:\n%s\nvs\n%s", tg.Name, rs, plain)
		}
		want[tg.Name] = rs.Digest
	}
	if got := memo.PeerSetsComputed(); got != uint64(rulesWithPeers) {
		t.Errorf("one round over 250 pods computed %d peer sets, want %d", got, rulesWithPeers)
	}
	// A new version: computed again, once, and never served stale.
	s.AddPeer(&netpol.Peer{Namespace: "p1", Name: "new", Labels: map[string]string{"app": "1"},
		Addrs: map[netpol.Identity][]netip.Addr{{NAD: "local/net"}: {netip.MustParseAddr("10.77.0.1")}}})
	s.AddNamespace("p1", map[string]string{"tier": "1"})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(targets); i += 2 {
				rs, _ := netpol.Render(targets[i], s, netpol.Options{}, memo)
				plain, _ := netpol.Render(targets[i], s, netpol.Options{}, nil)
				if rs.Digest != plain.Digest {
					t.Errorf("%s: stale or racy memo", targets[i].Name)
				}
				if rs.Digest == want[targets[i].Name] {
					t.Errorf("%s: the new namespace label and peer changed nothing", targets[i].Name)
				}
			}
		}()
	}
	wg.Wait()
	if got := memo.PeerSetsComputed(); got < uint64(2*rulesWithPeers) || got > uint64(2*rulesWithPeers+2*rulesWithPeers) {
		t.Errorf("second round: %d peer sets in total, want %d (+ at most %d computed twice by racing workers)",
			got, 2*rulesWithPeers, 2*rulesWithPeers)
	}
	// A render of an older version than the memo's neither uses nor fills it.
	old, _, _ := roundWorld(1)
	before := memo.PeerSetsComputed()
	rs, _ := netpol.Render(targets[0], old, netpol.Options{}, memo)
	if rs.Digest != want[targets[0].Name] {
		t.Errorf("an older version got the newer memo's peer sets")
	}
	if memo.PeerSetsComputed() != before+uint64(rulesWithPeers) {
		t.Errorf("older version: computed %d, want %d", memo.PeerSetsComputed()-before, rulesWithPeers)
	}
}

// The same input in any map and insertion order gives the same digest; a
// different input a different one.
func TestDigestDeterministic(t *testing.T) {
	build := func(r *rand.Rand) (*netpoltest.Snapshot, netpol.Target) {
		s := netpoltest.New()
		nss := []string{"x", "y", "z", "w"}
		r.Shuffle(len(nss), func(i, j int) { nss[i], nss[j] = nss[j], nss[i] })
		for _, ns := range nss {
			s.AddNamespace(ns, shuffled(r, map[string]string{"team": ns, "env": "prod", "a": "1", "b": "2"}))
		}
		var peers []*netpol.Peer
		for _, ns := range nss {
			for j := range 8 {
				addrs := map[netpol.Identity][]netip.Addr{}
				ids := []netpol.Identity{{NAD: "x/net"}, {NAD: "y/net"}, {Node: "net"}, {NAD: "x/other"}}
				for _, k := range r.Perm(len(ids)) {
					id := ids[k]
					addrs[id] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(len(ns)), byte(j), byte(k)}),
						netip.MustParseAddr(fmt.Sprintf("fd00::%x:%x:%x", ns[0], j, k))}
				}
				peers = append(peers, &netpol.Peer{Namespace: ns, Name: fmt.Sprintf("p%d", j), Addrs: addrs,
					Labels:     shuffled(r, map[string]string{"app": fmt.Sprint(j % 3), "k": "v", "z": "z"}),
					NamedPorts: []netpol.NamedPort{{Name: "web", Protocol: netpol.ProtoTCP, Port: uint16(8000 + j)}}})
			}
		}
		r.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
		for _, p := range peers {
			s.AddPeer(p)
		}
		pols := []*netpol.Policy{
			netpoltest.Policy("x", "p1", "net, y/net", `
podSelector: {}
policyTypes: [Ingress, Egress]
ingress: [{from: [{namespaceSelector: {matchLabels: {env: prod}}, podSelector: {matchLabels: {app: "1"}}}, {ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}], ports: [{port: 443}, {port: 80}, {protocol: UDP}]}]
egress: [{to: [{namespaceSelector: {}}], ports: [{port: web}]}]`),
			netpoltest.Policy("x", "p2", "other", `
podSelector: {matchLabels: {app: server}}
ingress: [{from: [{podSelector: {}}]}]`),
		}
		r.Shuffle(len(pols), func(i, j int) { pols[i], pols[j] = pols[j], pols[i] })
		for _, p := range pols {
			s.AddPolicy(p)
		}
		tg := netpol.Target{Namespace: "x", Name: "server", Labels: shuffled(r, map[string]string{"app": "server", "a": "b"}),
			Interfaces: []netpol.Interface{
				{IfName: "net1", Identity: netpol.Identity{NAD: "x/net"}, IPs: netpoltest.Addrs("10.9.9.9", "fd00::9")},
				{IfName: "net2", Identity: netpol.Identity{NAD: "x/other"}},
				{IfName: "net3", Identity: netpol.Identity{Node: "net"}}}}
		r.Shuffle(len(tg.Interfaces), func(i, j int) { tg.Interfaces[i], tg.Interfaces[j] = tg.Interfaces[j], tg.Interfaces[i] })
		return s, tg
	}
	var first netpol.Ruleset
	for i := range 100 {
		s, tg := build(rand.New(rand.NewPCG(uint64(i), 42)))
		rs, notes := netpol.Render(tg, s, netpol.Options{AcceptICMP: true}, nil)
		if len(notes) > 0 {
			t.Fatalf("notes: %+v", notes)
		}
		if i == 0 {
			first = rs
			if len(rs.Chains) != 5 {
				t.Fatalf("want 5 chains:\n%s", rs)
			}
			continue
		}
		if rs.Digest != first.Digest || rs.String() != first.String() {
			t.Fatalf("run %d differs:\n%s\nvs\n%s", i, rs, first)
		}
	}
	deny := netpol.DenyAll(goldenTarget(), netpol.Options{})
	for i := range 10 {
		tg := goldenTarget()
		r := rand.New(rand.NewPCG(uint64(i), 7))
		r.Shuffle(len(tg.Interfaces), func(a, b int) { tg.Interfaces[a], tg.Interfaces[b] = tg.Interfaces[b], tg.Interfaces[a] })
		if got := netpol.DenyAll(tg, netpol.Options{}); got.Digest != deny.Digest || got.String() != deny.String() {
			t.Fatalf("DenyAll depends on the order of the interfaces:\n%s\nvs\n%s", got, deny)
		}
	}
	s, tg := build(rand.New(rand.NewPCG(1, 42)))
	s.AddNamespace("w", map[string]string{"env": "dev"})
	if rs, _ := netpol.Render(tg, s, netpol.Options{AcceptICMP: true}, nil); rs.Digest == first.Digest {
		t.Error("a namespace relabel did not change the digest")
	}
	s, tg = build(rand.New(rand.NewPCG(1, 42)))
	if rs, _ := netpol.Render(tg, s, netpol.Options{}, nil); rs.Digest == first.Digest {
		t.Error("acceptICMP did not change the digest")
	}
}

// shuffled copies m, inserting its keys in a random order.
func shuffled(r *rand.Rand, m map[string]string) map[string]string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	out := make(map[string]string, len(m))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}
