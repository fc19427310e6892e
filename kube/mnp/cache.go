// Package mnp is the Kubernetes side of MultiNetworkPolicy on nri-cni's
// secondary interfaces: the informers of MultiNetworkPolicies and
// Namespaces, a cluster-wide pod reflector into a compact peer index, the
// netpol.Snapshot the renderer reads, and the dirty queue that takes every
// change to the local sandboxes it affects (design-42 §4.4, §4.6).
//
// Everything the attach path reads comes from memory: Snapshot never calls
// the API server. Tenant input (policies, labels, network-status) is
// bounded in the transforms, before it is kept.
package mnp

import (
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/netpol"
)

// Cache is the node's view of policies, namespaces and peers. Its methods
// are safe for concurrent use; informer handlers, the reflector's store,
// attach (SetLocal, ForgetLocal) and renders (Snapshot) meet under mu.
type Cache struct {
	node   string
	limits netpol.Limits
	// dirty is told the sandboxes a change affects (nil: nobody).
	dirty func(ids map[string]string)

	mu         sync.Mutex
	version    uint64
	policies   map[string]map[string]*policyState // namespace → name
	namespaces map[string]*netpol.Namespace
	pods       map[string]map[string]*podEntry // namespace → name: kept pods
	local      map[string]*localSandbox        // sandbox ID
	localByNS  map[string]map[string]*localSandbox
	// changed: namespaces whose policies or peers changed since view.
	changed map[string]bool
	nsList  bool // the namespace list changed since view
	view    *view

	// synced reports each source's first list (nil: not started).
	policiesSynced, namespacesSynced func() bool
	podsSynced                       atomic.Bool

	// localSubs get this node's pods' changes (LocalPods).
	localSubs []cache.ResourceEventHandler
}

// policyState is a cached policy and its parsed selectors.
type policyState struct {
	p   *netpol.Policy
	sel *compiled
}

// localSandbox is one of this node's sandboxes nri-cni attached: its pod
// and the interfaces of its records (their IPs override network-status).
type localSandbox struct {
	id, namespace, name, uid string
	ifaces                   []netpol.Interface
}

// LocalPod names the pod of a local sandbox.
type LocalPod struct {
	Namespace, Name, UID string
}

func newCache(node string, limits netpol.Limits) *Cache {
	return &Cache{node: node, limits: limits, policies: map[string]map[string]*policyState{},
		namespaces: map[string]*netpol.Namespace{}, pods: map[string]map[string]*podEntry{},
		local: map[string]*localSandbox{}, localByNS: map[string]map[string]*localSandbox{}, changed: map[string]bool{}}
}

// notify hands affected sandboxes to the dirty queue (outside mu).
func (c *Cache) notify(out map[string]string) {
	if len(out) > 0 && c.dirty != nil {
		c.dirty(out)
	}
}

// SetLocal records (or replaces) a local sandbox's pod and interfaces, as
// nri-cni's records hold them: attach calls it after an attach or a
// hot-plug recorded them. Its IPs are the pod's as a peer, ahead of its
// network-status; it counts as a peer IP change.
func (c *Cache) SetLocal(sandboxID string, pod LocalPod, ifaces []netpol.Interface) {
	sb := &localSandbox{id: sandboxID, namespace: pod.Namespace, name: pod.Name, uid: pod.UID, ifaces: slices.Clone(ifaces)}
	out := map[string]string{}
	c.mu.Lock()
	old := c.local[sandboxID]
	if sameLocal(old, sb) {
		// attach tells a pod again at every ApplyPolicy: an unchanged
		// value is no change (else two pods would re-render each other
		// forever).
		c.mu.Unlock()
		return
	}
	c.removeLocal(old)
	c.local[sandboxID] = sb
	if c.localByNS[sb.namespace] == nil {
		c.localByNS[sb.namespace] = map[string]*localSandbox{}
	}
	c.localByNS[sb.namespace][sandboxID] = sb
	c.localChanged(old, sb, out)
	c.mu.Unlock()
	c.notify(out)
}

func sameLocal(a, b *localSandbox) bool {
	if a == nil || b == nil || a.namespace != b.namespace || a.name != b.name || a.uid != b.uid || len(a.ifaces) != len(b.ifaces) {
		return false
	}
	for i := range a.ifaces {
		x, y := a.ifaces[i], b.ifaces[i]
		if x.IfName != y.IfName || x.Identity != y.Identity || !slices.Equal(x.IPs, y.IPs) {
			return false
		}
	}
	return true
}

// ForgetLocal drops a sandbox torn down (a peer IP change too).
func (c *Cache) ForgetLocal(sandboxID string) {
	out := map[string]string{}
	c.mu.Lock()
	old := c.local[sandboxID]
	if old == nil {
		c.mu.Unlock()
		return
	}
	c.removeLocal(old)
	c.localChanged(old, nil, out)
	delete(out, sandboxID)
	c.mu.Unlock()
	c.notify(out)
}

func (c *Cache) removeLocal(sb *localSandbox) {
	if sb == nil {
		return
	}
	delete(c.local, sb.id)
	if m := c.localByNS[sb.namespace]; m != nil {
		delete(m, sb.id)
		if len(m) == 0 {
			delete(c.localByNS, sb.namespace)
		}
	}
}

// localChanged: a local record changed from old to cur, as a peer IP
// change of its pod. Called with c.mu held.
func (c *Cache) localChanged(old, cur *localSandbox, out map[string]string) {
	for _, sb := range []*localSandbox{old, cur} {
		if sb == nil {
			continue
		}
		c.changed[sb.namespace] = true
		e := c.pods[sb.namespace][sb.name]
		if e == nil || e.peer.UID != sb.uid {
			e = &podEntry{peer: netpol.Peer{Namespace: sb.namespace, Name: sb.name, UID: sb.uid, LabelsTruncated: true}, local: true, keep: true}
		}
		c.affectedByPod(e, nil, out)
	}
	if cur != nil {
		out[cur.id] = cur.namespace
	}
	c.version++
}

// applyPod stores (e != nil) or drops a pod of the index: the reflector's
// store calls it for every add, update and delete.
func (c *Cache) applyPod(key string, e *podEntry) {
	ns, name := splitKey(key)
	out := map[string]string{}
	c.mu.Lock()
	old := c.pods[ns][name]
	ev, local := localChange(old, e)
	subs := c.localSubs
	if !peerChanged(old, e) {
		if local && e != nil {
			c.pods[ns][name] = e // a local pod's metadata only
		}
		c.mu.Unlock()
		if local {
			tell(subs, []localEvent{ev})
		}
		return
	}
	if e == nil {
		delete(c.pods[ns], name)
		if len(c.pods[ns]) == 0 {
			delete(c.pods, ns)
		}
	} else {
		if c.pods[ns] == nil {
			c.pods[ns] = map[string]*podEntry{}
		}
		c.pods[ns][name] = e
	}
	c.changed[ns] = true
	c.version++
	c.affectedByPod(old, e, out)
	c.mu.Unlock()
	if local {
		tell(subs, []localEvent{ev})
	}
	c.notify(out)
}

// resetPods replaces the index with a full list (the reflector's first
// list, or a relist): every local sandbox is re-rendered.
func (c *Cache) resetPods(entries []*podEntry) {
	pods := map[string]map[string]*podEntry{}
	for _, e := range entries {
		ns := e.peer.Namespace
		if pods[ns] == nil {
			pods[ns] = map[string]*podEntry{}
		}
		pods[ns][e.peer.Name] = e
	}
	out := map[string]string{}
	var evs []localEvent
	c.mu.Lock()
	for ns, m := range c.pods {
		c.changed[ns] = true
		for name, old := range m {
			if ev, ok := localChange(old, pods[ns][name]); ok {
				evs = append(evs, ev)
			}
		}
	}
	for ns, m := range pods {
		for name, e := range m {
			if c.pods[ns][name] == nil {
				if ev, ok := localChange(nil, e); ok {
					evs = append(evs, ev)
				}
			}
		}
	}
	subs := c.localSubs
	for ns := range pods {
		c.changed[ns] = true
	}
	c.pods = pods
	c.version++
	for id, sb := range c.local {
		out[id] = sb.namespace
	}
	c.mu.Unlock()
	c.podsSynced.Store(true)
	tell(subs, evs)
	c.notify(out)
}

// applyPolicy stores (cur != nil) or drops a policy.
func (c *Cache) applyPolicy(old, cur *cachedPolicy) {
	out := map[string]string{}
	c.mu.Lock()
	for _, cp := range []*cachedPolicy{old, cur} {
		if cp != nil {
			c.changed[cp.Namespace] = true
			c.affectedByPolicy(cp.Namespace, out)
		}
	}
	if old != nil {
		delete(c.policies[old.Namespace], old.Name)
		if len(c.policies[old.Namespace]) == 0 {
			delete(c.policies, old.Namespace)
		}
	}
	if cur != nil {
		if c.policies[cur.Namespace] == nil {
			c.policies[cur.Namespace] = map[string]*policyState{}
		}
		c.policies[cur.Namespace][cur.Name] = &policyState{p: cur.policy, sel: compile(cur.policy)}
	}
	c.version++
	c.mu.Unlock()
	c.notify(out)
}

// applyNamespace stores (cur != nil) or drops a namespace.
func (c *Cache) applyNamespace(old, cur *netpol.Namespace) {
	if old != nil && cur != nil && old.Truncated == cur.Truncated && mapsEqual(old.Labels, cur.Labels) {
		return
	}
	out := map[string]string{}
	c.mu.Lock()
	if cur != nil {
		c.namespaces[cur.Name] = cur
	} else if old != nil {
		delete(c.namespaces, old.Name)
	}
	c.nsList = true
	c.version++
	c.affectedByNamespace(old, cur, out)
	c.mu.Unlock()
	c.notify(out)
}

// Synced reports whether all three sources have had their first list.
func (c *Cache) Synced() bool {
	return c.podsSynced.Load() && c.policiesSynced != nil && c.policiesSynced() &&
		c.namespacesSynced != nil && c.namespacesSynced()
}

// Snapshot is the cache as of now: immutable, answered from memory. Only
// what changed since the last Snapshot is rebuilt (per namespace).
func (c *Cache) Snapshot() netpol.Snapshot {
	synced := c.Synced()
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.view; v != nil && v.synced != synced {
		c.version++ // Synced is part of what a version answers
	}
	if v := c.view; v != nil && v.version == c.version {
		return v
	}
	v := &view{version: c.version, synced: synced, policies: map[string][]*netpol.Policy{}, peers: map[string][]*netpol.Peer{}}
	if prev := c.view; prev != nil {
		maps.Copy(v.policies, prev.policies)
		maps.Copy(v.peers, prev.peers)
		v.namespaces = prev.namespaces
	}
	if v.namespaces == nil || c.nsList {
		v.namespaces = make([]*netpol.Namespace, 0, len(c.namespaces))
		for _, n := range c.namespaces {
			v.namespaces = append(v.namespaces, n)
		}
		sort.Slice(v.namespaces, func(i, j int) bool { return v.namespaces[i].Name < v.namespaces[j].Name })
		c.nsList = false
	}
	for ns := range c.changed {
		v.policies[ns] = c.policySlice(ns)
		v.peers[ns] = c.peerSlice(ns)
		if v.policies[ns] == nil {
			delete(v.policies, ns)
		}
		if v.peers[ns] == nil {
			delete(v.peers, ns)
		}
	}
	clear(c.changed)
	c.view = v
	return v
}

// policySlice is a namespace's policies sorted by name. Called with c.mu
// held.
func (c *Cache) policySlice(ns string) []*netpol.Policy {
	m := c.policies[ns]
	if len(m) == 0 {
		return nil
	}
	out := make([]*netpol.Policy, 0, len(m))
	for _, st := range m {
		out = append(out, st.p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// peerSlice is a namespace's peers sorted by name: its non-terminal pods
// with addresses, those of local sandboxes taken from their records first.
// Called with c.mu held.
func (c *Cache) peerSlice(ns string) []*netpol.Peer {
	var out []*netpol.Peer
	byUID := map[string][]*localSandbox{}
	for _, sb := range c.localByNS[ns] {
		byUID[sb.uid] = append(byUID[sb.uid], sb)
	}
	for _, e := range c.pods[ns] {
		if e.terminal {
			continue
		}
		p := &e.peer
		if sbs := byUID[p.UID]; len(sbs) > 0 {
			p = withRecords(p, sbs)
			delete(byUID, p.UID)
		}
		if len(p.Addrs) > 0 {
			out = append(out, p)
		}
	}
	// Local sandboxes whose pod the reflector has not shown yet: peers
	// by namespace only (their labels are unknown: truncated).
	for uid, sbs := range byUID {
		p := withRecords(&netpol.Peer{Namespace: ns, Name: sbs[0].name, UID: uid, LabelsTruncated: true}, sbs)
		if len(p.Addrs) > 0 {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// withRecords is p with the addresses of its sandboxes' records in place
// of network-status's for each identity they name.
func withRecords(p *netpol.Peer, sbs []*localSandbox) *netpol.Peer {
	rec := map[netpol.Identity][]netip.Addr{}
	sort.Slice(sbs, func(i, j int) bool { return sbs[i].id < sbs[j].id })
	for _, sb := range sbs {
		for _, i := range sb.ifaces {
			rec[i.Identity] = append(rec[i.Identity], i.IPs...)
		}
	}
	q := *p
	q.Addrs = make(map[netpol.Identity][]netip.Addr, len(p.Addrs)+len(rec))
	maps.Copy(q.Addrs, p.Addrs)
	for id, a := range rec {
		if len(a) > 0 {
			q.Addrs[id] = a
		}
	}
	return &q
}

func splitKey(key string) (ns, name string) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// view is an immutable Snapshot.
type view struct {
	version    uint64
	synced     bool
	policies   map[string][]*netpol.Policy
	peers      map[string][]*netpol.Peer
	namespaces []*netpol.Namespace
}

func (v *view) Version() uint64                            { return v.version }
func (v *view) Synced() bool                               { return v.synced }
func (v *view) Policies(namespace string) []*netpol.Policy { return v.policies[namespace] }
func (v *view) Namespaces() []*netpol.Namespace            { return v.namespaces }
func (v *view) Peers(namespace string) []*netpol.Peer      { return v.peers[namespace] }
