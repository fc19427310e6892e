package mnp

// Hot-plug shares the pod watch: with MultiNetworkPolicy on, kube's
// PodWatcher takes this node's pods from the reflector (LocalPods) instead
// of a watch of its own, so the node keeps one pod watch. A local pod's
// metadata (annotations, UID, deletion) is handed over as an informer
// would: add, update (the same resourceVersion: a resync), delete.

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/netpol"
)

// LocalPods is this node's pods as the reflector sees them.
type LocalPods struct{ c *Cache }

// LocalPods is the cache's feed of this node's pods.
func (c *Cache) LocalPods() LocalPods { return LocalPods{c} }

// AddEventHandler hands h every later change of a local pod (on the
// reflector's goroutine: h must not block), and the local pods cached now
// as adds.
func (l LocalPods) AddEventHandler(h cache.ResourceEventHandler) {
	l.c.mu.Lock()
	l.c.localSubs = append(l.c.localSubs, h)
	var now []*corev1.Pod
	for _, m := range l.c.pods {
		for _, e := range m {
			if e.meta != nil {
				now = append(now, e.meta)
			}
		}
	}
	l.c.mu.Unlock()
	for _, p := range now {
		h.OnAdd(p, false)
	}
}

// Get is the local pod namespace/name (false: none).
func (l LocalPods) Get(namespace, name string) (*corev1.Pod, bool) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	e := l.c.pods[namespace][name]
	if e == nil || e.meta == nil {
		return nil, false
	}
	return e.meta, true
}

// Keys are the local pods' namespace/name, sorted.
func (l LocalPods) Keys() []string {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	var out []string
	for _, m := range l.c.pods {
		for _, e := range m {
			if e.meta != nil {
				out = append(out, e.key())
			}
		}
	}
	sort.Strings(out)
	return out
}

// HasSynced: the reflector's first list is in.
func (l LocalPods) HasSynced() bool { return l.c.podsSynced.Load() }

// localEvent is one change for the subscribers.
type localEvent struct{ old, cur *corev1.Pod }

// localEvents are the changes of local pods between old and cur (called
// with c.mu held).
func localChange(old, cur *podEntry) (localEvent, bool) {
	var ev localEvent
	if old != nil {
		ev.old = old.meta
	}
	if cur != nil {
		ev.cur = cur.meta
	}
	if ev.old == nil && ev.cur == nil {
		return ev, false
	}
	if ev.old != nil && ev.cur != nil && ev.old.ResourceVersion == ev.cur.ResourceVersion && ev.old.ResourceVersion != "" {
		return ev, false
	}
	return ev, true
}

// tell hands events to the subscribers (outside c.mu).
func tell(subs []cache.ResourceEventHandler, evs []localEvent) {
	for _, ev := range evs {
		for _, h := range subs {
			switch {
			case ev.old == nil:
				h.OnAdd(ev.cur, false)
			case ev.cur == nil:
				h.OnDelete(ev.old)
			default:
				h.OnUpdate(ev.old, ev.cur)
			}
		}
	}
}

// TargetOf is what the reflector knows of a local pod for its Target: its
// labels and named ports, when the cached pod has uid (false: not seen yet,
// or another pod of that name; attach then takes the sandbox's labels, and
// named ports resolve to nothing until the pod arrives, which re-renders).
// The returned values are shared: read only.
func (c *Cache) TargetOf(namespace, name, uid string) (labels map[string]string, ports []netpol.NamedPort, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.pods[namespace][name]
	if e == nil || !e.local || e.peer.UID != uid {
		return nil, nil, false
	}
	return e.peer.Labels, e.peer.NamedPorts, true
}
