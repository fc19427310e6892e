// Package netpoltest is an in-memory netpol.Snapshot for tests of netpol
// and of its consumers (kube, attach): policies written as YAML specs,
// namespaces and peers added by hand.
package netpoltest

import (
	"net/netip"
	"slices"
	"strings"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/netpol"
)

// Snapshot is a fake netpol.Snapshot. Every change bumps Version. It is
// safe for concurrent reads.
type Snapshot struct {
	mu       sync.RWMutex
	version  uint64
	unsynced bool
	policies map[string][]*netpol.Policy
	nss      []*netpol.Namespace
	peers    map[string][]*netpol.Peer
}

var _ netpol.Snapshot = (*Snapshot)(nil)

// New returns a synced, empty snapshot at version 1.
func New() *Snapshot {
	return &Snapshot{version: 1, policies: map[string][]*netpol.Policy{}, peers: map[string][]*netpol.Peer{}}
}

func (s *Snapshot) Version() uint64 { s.mu.RLock(); defer s.mu.RUnlock(); return s.version }
func (s *Snapshot) Synced() bool    { s.mu.RLock(); defer s.mu.RUnlock(); return !s.unsynced }

func (s *Snapshot) Policies(ns string) []*netpol.Policy {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.policies[ns]
}

func (s *Snapshot) Namespaces() []*netpol.Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.nss
}

func (s *Snapshot) Peers(ns string) []*netpol.Peer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.peers[ns]
}

// SetSynced marks the caches synced or not.
func (s *Snapshot) SetSynced(synced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsynced = !synced
	s.version++
}

// AddPolicy adds or replaces (by namespace and name) a policy.
func (s *Snapshot) AddPolicy(p *netpol.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policies[p.Namespace] = put(s.policies[p.Namespace], p, func(o *netpol.Policy) string { return o.Name })
	s.version++
}

// DeletePolicy removes a policy.
func (s *Snapshot) DeletePolicy(ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policies[ns] = slices.DeleteFunc(slices.Clone(s.policies[ns]), func(o *netpol.Policy) bool { return o.Name == name })
	s.version++
}

// AddNamespace adds or replaces a namespace; "kubernetes.io/metadata.name"
// is set as the API server sets it.
func (s *Snapshot) AddNamespace(name string, labels map[string]string) {
	l := map[string]string{"kubernetes.io/metadata.name": name}
	for k, v := range labels {
		l[k] = v
	}
	s.PutNamespace(&netpol.Namespace{Name: name, Labels: l})
}

// PutNamespace adds or replaces a namespace as given.
func (s *Snapshot) PutNamespace(n *netpol.Namespace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nss = put(s.nss, n, func(o *netpol.Namespace) string { return o.Name })
	s.version++
}

// AddPeer adds or replaces (by namespace and name) a peer pod.
func (s *Snapshot) AddPeer(p *netpol.Peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peers[p.Namespace] = put(s.peers[p.Namespace], p, func(o *netpol.Peer) string { return o.Name })
	s.version++
}

// DeletePeer removes a peer pod.
func (s *Snapshot) DeletePeer(ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peers[ns] = slices.DeleteFunc(slices.Clone(s.peers[ns]), func(o *netpol.Peer) bool { return o.Name == name })
	s.version++
}

// put returns a copy of the list sorted by name with v added, or in place
// of the element of its name: readers keep the slice they were given.
func put[T any](l []T, v T, name func(T) string) []T {
	out := slices.DeleteFunc(slices.Clone(l), func(o T) bool { return name(o) == name(v) })
	out = append(out, v)
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(name(a), name(b)) })
	return out
}

// Policy builds a policy from a YAML NetworkPolicySpec; it panics on YAML
// that does not parse (a test's own typo).
func Policy(ns, name, policyFor, specYAML string) *netpol.Policy {
	var spec networkingv1.NetworkPolicySpec
	if err := yaml.UnmarshalStrict([]byte(specYAML), &spec); err != nil {
		panic("netpoltest.Policy " + ns + "/" + name + ": " + err.Error())
	}
	return &netpol.Policy{Namespace: ns, Name: name, UID: ns + "/" + name, Generation: 1, PolicyFor: policyFor, Spec: &spec}
}

// Addrs parses addresses; it panics on one that does not parse.
func Addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}
