package mnp

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/netpol"
)

// recorder collects what the cache marks dirty.
type marks struct{ got map[string]string }

func (m *marks) take() []string {
	out := slices.Sorted(maps.Keys(m.got))
	clear(m.got)
	return out
}

func testCache() (*Cache, *marks) {
	c := newCache(node, netpol.DefaultLimits())
	m := &marks{got: map[string]string{}}
	c.dirty = func(ids map[string]string) { maps.Copy(m.got, ids) }
	return c, m
}

func cpolicy(ns, name string, gen int64, spec networkingv1.NetworkPolicySpec) *cachedPolicy {
	out, _ := policyTransform(netpol.DefaultLimits())(&v1beta1.MultiNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Generation: gen}, Spec: spec})
	return out.(*cachedPolicy)
}

func sel(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func ingressFrom(target *metav1.LabelSelector, peers ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicySpec {
	return networkingv1.NetworkPolicySpec{PodSelector: *target, Ingress: []networkingv1.NetworkPolicyIngressRule{{From: peers}}}
}

func nsObj(name string, kv ...string) *netpol.Namespace {
	out, _ := namespaceTransform(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: sel(kv...).MatchLabels}})
	return out.(*cachedNamespace).ns
}

// setup: namespaces x (team=red) and y (team=blue); local sandboxes sx1
// (x/server, app=server), sx2 (x/client, app=client), sy1 (y/db, app=db);
// a remote peer z/peer (app=peer) on a/net.
func setup(t *testing.T) (*Cache, *marks) {
	t.Helper()
	c, m := testCache()
	c.applyNamespace(nil, nsObj("x", "team", "red"))
	c.applyNamespace(nil, nsObj("y", "team", "blue"))
	c.applyNamespace(nil, nsObj("z", "team", "green"))
	for _, p := range []*corev1.Pod{pod("x", "server", node, "", map[string]string{"app": "server"}),
		pod("x", "client", node, "", map[string]string{"app": "client"}), pod("y", "db", node, "", map[string]string{"app": "db"}),
		pod("z", "peer", "node-b", status("a/net=10.1.0.9"), map[string]string{"app": "peer"})} {
		c.applyPod(p.Namespace+"/"+p.Name, compact(p, node))
	}
	c.SetLocal("sx1", LocalPod{"x", "server", "uid-server"}, []netpol.Interface{{IfName: "net1", Identity: netpol.Identity{NAD: "a/net"}, IPs: []netip.Addr{addr("10.1.0.1")}}})
	c.SetLocal("sx2", LocalPod{"x", "client", "uid-client"}, nil)
	c.SetLocal("sy1", LocalPod{"y", "db", "uid-db"}, nil)
	m.take()
	return c, m
}

func TestAffected(t *testing.T) {
	// Policies: x/allow-peer selects app=server, ingress from pods app=peer
	// of namespaces team=green; y/allow-red selects app=db, ingress from
	// namespaces team=red; x/same-ns selects app=client, from app=server.
	policies := []*cachedPolicy{
		cpolicy("x", "allow-peer", 1, ingressFrom(sel("app", "server"),
			networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "peer"), NamespaceSelector: sel("team", "green")})),
		cpolicy("y", "allow-red", 1, ingressFrom(sel("app", "db"), networkingv1.NetworkPolicyPeer{NamespaceSelector: sel("team", "red")})),
		cpolicy("x", "same-ns", 1, ingressFrom(sel("app", "client"), networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "server")})),
	}
	peerPod := pod("z", "peer", "node-b", status("a/net=10.1.0.9"), map[string]string{"app": "peer"})
	cases := []struct {
		name  string
		event func(c *Cache)
		want  []string
	}{
		{"policy added: every local sandbox of its namespace", func(c *Cache) {
			c.applyPolicy(nil, cpolicy("x", "new", 1, networkingv1.NetworkPolicySpec{}))
		}, []string{"sx1", "sx2"}},
		{"policy deleted", func(c *Cache) { c.applyPolicy(policies[1], nil) }, []string{"sy1"}},
		{"namespace relabelled into a namespaceSelector", func(c *Cache) {
			c.applyNamespace(nsObj("z", "team", "green"), nsObj("z", "team", "red"))
		}, []string{"sx1", "sy1"}}, // old labels match allow-peer, new ones allow-red
		{"namespace relabelled, no selector cares", func(c *Cache) {
			c.applyNamespace(nsObj("z", "team", "green"), nsObj("z", "team", "green", "extra", "1"))
		}, []string{"sx1"}},
		{"a namespace no selector matches, old or new", func(c *Cache) {
			c.applyNamespace(nsObj("w", "team", "purple"), nsObj("w", "team", "black"))
		}, nil},
		{"namespace labels unchanged", func(c *Cache) {
			c.applyNamespace(nsObj("z", "team", "green"), nsObj("z", "team", "green"))
		}, nil},
		{"peer IP changed", func(c *Cache) {
			c.applyPod("z/peer", compact(pod("z", "peer", "node-b", status("a/net=10.1.0.10"), map[string]string{"app": "peer"}), node))
		}, []string{"sx1"}},
		{"peer relabelled out of the selector", func(c *Cache) {
			c.applyPod("z/peer", compact(pod("z", "peer", "node-b", status("a/net=10.1.0.9"), map[string]string{"app": "other"}), node))
		}, []string{"sx1"}},
		{"peer unchanged (a resync)", func(c *Cache) { c.applyPod("z/peer", compact(peerPod, node)) }, nil},
		{"peer turned terminal", func(c *Cache) {
			p := peerPod.DeepCopy()
			p.Status.Phase = corev1.PodFailed
			c.applyPod("z/peer", compact(p, node))
		}, []string{"sx1"}},
		{"a pod no policy selects as a peer", func(c *Cache) {
			c.applyPod("z/lone", compact(pod("z", "lone", "node-b", status("a/net=10.1.0.11"), map[string]string{"app": "lone"}), node))
		}, nil},
		{"a pod of namespace x matching same-ns's podSelector-only peer", func(c *Cache) {
			c.applyPod("x/remote", compact(pod("x", "remote", "node-b", status("a/net=10.1.0.12"), map[string]string{"app": "server"}), node))
		}, []string{"sx2", "sy1"}}, // and allow-red: x is team=red
		{"the same labels in another namespace: podSelector-only peers are the policy's namespace", func(c *Cache) {
			c.applyPod("z/srv", compact(pod("z", "srv", "node-b", status("a/net=10.1.0.13"), map[string]string{"app": "server"}), node))
		}, nil},
		{"a local pod relabelled: itself, and policies that select it as a peer", func(c *Cache) {
			c.applyPod("x/server", compact(pod("x", "server", node, "", map[string]string{"app": "server", "v": "2"}), node))
		}, []string{"sx1", "sx2", "sy1"}},
		{"a local record changed: as a peer IP change, plus the sandbox", func(c *Cache) {
			c.SetLocal("sx1", LocalPod{"x", "server", "uid-server"}, []netpol.Interface{{IfName: "net1", Identity: netpol.Identity{NAD: "a/net"}, IPs: []netip.Addr{addr("10.1.0.2")}}})
		}, []string{"sx1", "sx2", "sy1"}},
		{"a local sandbox forgotten: its peers' policies", func(c *Cache) { c.ForgetLocal("sx1") }, []string{"sx2", "sy1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, m := setup(t)
			for _, p := range policies {
				c.applyPolicy(nil, p)
			}
			m.take()
			tc.event(c)
			if got := m.take(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("affected %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	c, _ := setup(t)
	policiesSynced := false
	c.policiesSynced = func() bool { return policiesSynced }
	c.namespacesSynced = func() bool { return true }
	c.resetPods(nil) // the pods' first list: nothing
	s1 := c.Snapshot()
	if s1.Synced() {
		t.Fatal("synced before the policies' first list")
	}
	if c.Snapshot() != s1 {
		t.Error("nothing changed, yet a new snapshot")
	}
	policiesSynced = true // nothing else changes
	s2 := c.Snapshot()
	if !s2.Synced() || s2.Version() == s1.Version() {
		t.Fatalf("after sync: synced %v, version %d → %d", s2.Synced(), s1.Version(), s2.Version())
	}
	for _, p := range []*corev1.Pod{pod("z", "b", "node-b", status("a/net=10.1.0.3"), nil), pod("z", "a", "node-b", status("a/net=10.1.0.2"), nil),
		pod("z", "dead", "node-b", status("a/net=10.1.0.4"), nil), pod("x", "server", node, status("a/net=10.9.9.9", "b/other=10.8.0.1"), nil)} {
		if p.Name == "dead" {
			p.Status.Phase = corev1.PodSucceeded
		}
		c.applyPod(p.Namespace+"/"+p.Name, compact(p, node))
	}
	c.applyPolicy(nil, cpolicy("x", "b", 1, networkingv1.NetworkPolicySpec{}))
	c.applyPolicy(nil, cpolicy("x", "a", 1, networkingv1.NetworkPolicySpec{}))
	s3 := c.Snapshot()
	if s3.Version() == s2.Version() {
		t.Error("version unchanged after changes")
	}
	if len(s2.Peers("z")) != 0 || len(s2.Policies("x")) != 0 {
		t.Error("an older snapshot changed")
	}
	var names []string
	for _, p := range s3.Peers("z") {
		names = append(names, p.Name)
	}
	if fmt.Sprint(names) != "[a b]" {
		t.Errorf("peers of z %v, want [a b] (sorted, the terminal one left out)", names)
	}
	if ps := s3.Policies("x"); len(ps) != 2 || ps[0].Name != "a" {
		t.Errorf("policies of x not sorted: %v", ps)
	}
	if ns := s3.Namespaces(); len(ns) != 3 || ns[0].Name != "x" || ns[2].Name != "z" {
		t.Errorf("namespaces %v", ns)
	}
	// x/server's record (10.1.0.1 on a/net) wins over its network-status
	// for a/net; b/other comes from network-status.
	srv := s3.Peers("x")
	if len(srv) != 1 {
		t.Fatalf("peers of x: %v", srv)
	}
	got := srv[0].Addrs
	if fmt.Sprint(got[netpol.Identity{NAD: "a/net"}]) != "[10.1.0.1]" || fmt.Sprint(got[netpol.Identity{NAD: "b/other"}]) != "[10.8.0.1]" {
		t.Errorf("local peer addrs %v", got)
	}
	// A local sandbox whose pod the reflector has not shown: a peer by
	// namespace only.
	c.SetLocal("new", LocalPod{"y", "fresh", "uid-fresh"}, []netpol.Interface{{IfName: "net1", Identity: netpol.Identity{Node: "storage"}, IPs: []netip.Addr{addr("10.5.0.1")}}})
	s4 := c.Snapshot()
	var fresh *netpol.Peer
	for _, p := range s4.Peers("y") {
		if p.Name == "fresh" {
			fresh = p
		}
	}
	if fresh == nil || !fresh.LabelsTruncated {
		t.Errorf("a local sandbox without a pod entry: %+v", fresh)
	}
	if s4.Version() == s3.Version() || len(s3.Peers("y")) != 0 {
		t.Error("SetLocal did not make a new version, or changed an old one")
	}
}

// attach tells a pod again at every ApplyPolicy: the same value marks
// nothing (two pods allowing each other would otherwise re-render each
// other forever); a changed address marks the pod and its policies' pods.
func TestSetLocalUnchangedIsNoChange(t *testing.T) {
	c, m := setup(t)
	c.applyPolicy(nil, cpolicy("x", "p", 1, ingressFrom(sel("app", "server"), networkingv1.NetworkPolicyPeer{PodSelector: sel("app", "client")})))
	m.take()
	v := c.Snapshot().Version()
	ifs := []netpol.Interface{{IfName: "net1", Identity: netpol.Identity{NAD: "a/net"}, IPs: []netip.Addr{addr("10.1.0.1")}}}
	c.SetLocal("sx1", LocalPod{"x", "server", "uid-server"}, slices.Clone(ifs))
	if got := m.take(); len(got) != 0 {
		t.Errorf("unchanged SetLocal marked %v", got)
	}
	if c.Snapshot().Version() != v {
		t.Error("unchanged SetLocal made a new snapshot")
	}
	ifs[0].IPs = []netip.Addr{addr("10.1.0.2")}
	c.SetLocal("sx1", LocalPod{"x", "server", "uid-server"}, ifs)
	if got := m.take(); !slices.Contains(got, "sx1") {
		t.Errorf("changed SetLocal marked %v, want sx1 among them", got)
	}
}
