package netpol

import (
	"net/netip"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
)

// Memo shares the target-independent work of rendering between the Render
// calls of one snapshot version: compiled policies and the peer set of
// every (policy, direction, rule). A reconcile round over many local pods
// therefore evaluates each peer selector once. It is safe for concurrent
// use; entries of an older version are dropped when a newer one is seen,
// and a Render of an older version than the memo's computes without it.
type Memo struct {
	mu      sync.Mutex
	version uint64
	limits  Limits
	used    bool
	pols    map[polKey]*compiled
	peers   map[peerKey]*peerSet
	// rules rendered from a policy rule that does not depend on the
	// target (every rule but an ingress one with a named port).
	rules map[peerKey][]Rule
	// computed counts peer sets computed (not taken from the memo).
	computed uint64
}

// NewMemo returns an empty memo.
func NewMemo() *Memo { return &Memo{} }

// polKey identifies a policy within one snapshot version (design-42 §4.3:
// UID and generation, direction and rule index, snapshot version; the
// name too, since test snapshots may leave UID empty).
type polKey struct {
	ns, name, uid string
	generation    int64
}

func keyOf(p *Policy) polKey { return polKey{p.Namespace, p.Name, p.UID, p.Generation} }

// peerKey identifies one rule's peers; index -1 is "every peer of the
// cluster" (an egress rule with no peers and a named port).
type peerKey struct {
	pol   polKey
	dir   Direction
	index int
}

// peerSet is what one rule's peers resolve to.
type peerSet struct {
	// prefixes per family (0 IPv4, 1 IPv6): pod addresses on the policy's
	// networks and ipBlocks, merged.
	prefixes [2][]netip.Prefix
	// pods selected, for egress named ports (resolved per destination).
	pods []*Peer
}

// PeerSetsComputed is how many peer sets were computed rather than reused
// (tests and metrics).
func (m *Memo) PeerSetsComputed() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.computed
}

// view is one Render call's access to the memo: usable says whether the
// memo holds this version.
type view struct {
	m       *Memo
	usable  bool
	version uint64
}

func (m *Memo) view(version uint64, lim Limits) view {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.used || version > m.version || (version == m.version && lim != m.limits) {
		m.used, m.version, m.limits = true, version, lim
		m.pols = map[polKey]*compiled{}
		m.peers = map[peerKey]*peerSet{}
		m.rules = map[peerKey][]Rule{}
	}
	return view{m: m, usable: version == m.version && lim == m.limits, version: version}
}

func (v view) policy(p *Policy, lim Limits) *compiled {
	k := keyOf(p)
	if v.usable {
		v.m.mu.Lock()
		c, ok := v.m.pols[k]
		v.m.mu.Unlock()
		if ok && c.pol == p {
			return c
		}
	}
	c := compile(p, lim)
	if v.usable {
		v.m.mu.Lock()
		if v.m.version == v.version {
			v.m.pols[k] = c
		}
		v.m.mu.Unlock()
	}
	return c
}

func (v view) peerSet(k peerKey, compute func() (*peerSet, bool)) (*peerSet, bool) {
	if v.usable {
		v.m.mu.Lock()
		ps, ok := v.m.peers[k]
		v.m.mu.Unlock()
		if ok {
			return ps, true
		}
	}
	ps, ok := compute()
	v.m.mu.Lock()
	v.m.computed++
	if ok && v.usable && v.m.version == v.version {
		v.m.peers[k] = ps
	}
	v.m.mu.Unlock()
	return ps, ok
}

func (v view) rules(k peerKey) ([]Rule, bool) {
	if !v.usable {
		return nil, false
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	r, ok := v.m.rules[k]
	return r, ok
}

func (v view) keepRules(k peerKey, r []Rule) {
	if !v.usable {
		return
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if v.m.version == v.version {
		v.m.rules[k] = slices.Clip(r)
	}
}

// budget counts selector evaluations (and peers visited) of one Render.
type budget struct{ left int }

func (b *budget) spend(n int) bool {
	if b.left < n {
		b.left = 0
		return false
	}
	b.left -= n
	return true
}

// computePeers resolves a rule's peers: ipBlocks as they are, pods by
// their selectors, each pod's addresses on any of the policy's networks
// (the union upstream uses). ok is false when the budget ran out.
func computePeers(c *compiled, r *crule, snap Snapshot, b *budget) (*peerSet, bool) {
	var set addrSet
	ps := &peerSet{}
	var nsList []*Namespace
	for i := range r.peers {
		p := &r.peers[i]
		if p.isIP {
			set.addSpans(p.fam, p.block)
			continue
		}
		var names []string
		if p.ns == nil {
			names = []string{c.pol.Namespace}
		} else {
			if nsList == nil {
				nsList = snap.Namespaces()
			}
			for _, ns := range nsList {
				if !b.spend(1) {
					return nil, false
				}
				if !ns.Truncated && p.ns.Matches(labels.Set(ns.Labels)) {
					names = append(names, ns.Name)
				}
			}
		}
		for _, ns := range names {
			for _, pod := range snap.Peers(ns) {
				if !b.spend(1) {
					return nil, false
				}
				if pod.LabelsTruncated || (p.pod != nil && !p.pod.Matches(labels.Set(pod.Labels))) {
					continue
				}
				if addPodAddrs(&set, pod, c.nets) {
					ps.pods = append(ps.pods, pod)
				}
			}
		}
	}
	ps.prefixes = set.prefixes()
	return ps, true
}

// allPeers is every peer of the cluster with an address on the policy's
// networks: the destinations of an egress rule with no "to" and a named
// port.
func allPeers(c *compiled, snap Snapshot, b *budget) (*peerSet, bool) {
	ps := &peerSet{}
	var set addrSet
	for _, ns := range snap.Namespaces() {
		for _, pod := range snap.Peers(ns.Name) {
			if !b.spend(1) {
				return nil, false
			}
			if addPodAddrs(&set, pod, c.nets) {
				ps.pods = append(ps.pods, pod)
			}
		}
	}
	ps.prefixes = set.prefixes()
	return ps, true
}

// addPodAddrs adds the pod's addresses on the networks; it says whether
// there were any.
func addPodAddrs(set *addrSet, pod *Peer, nets networks) bool {
	any := false
	for id, addrs := range pod.Addrs {
		if !nets.matches(id) {
			continue
		}
		for _, a := range addrs {
			if a.IsValid() {
				set.addAddr(a)
				any = true
			}
		}
	}
	return any
}
