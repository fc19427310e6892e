package mnp

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/netpol"
)

// Options tune New. The lead's config section (kubernetes.multiNetworkPolicy)
// fills them; zero values take the defaults.
type Options struct {
	// Node is this node's name (spec.nodeName of its pods).
	Node string
	// Limits bound what the transforms keep (zero: netpol.DefaultLimits).
	Limits netpol.Limits
	// PropagationDelay coalesces the changes to one sandbox (default
	// 100 ms).
	PropagationDelay time.Duration
	// Workers apply policies at once (default 2).
	Workers int
	// ApplyTimeout bounds one ApplyPolicy (default 30 s).
	ApplyTimeout time.Duration
	// Applier and Quarantiner are the attach engine's.
	Applier     PolicyApplier
	Quarantiner Quarantiner
	// Recorder raises Events (nil: none); Observer takes metrics (nil:
	// none); Log gets the edge's lines (nil: none).
	Recorder record.EventRecorder
	Observer Observer
	Log      *logrus.Entry
	// DiscoveryRetry: how often discovery is asked again while the CRD is
	// not served (default 30 s).
	DiscoveryRetry time.Duration
}

// MNP is MultiNetworkPolicy's Kubernetes side on one node: the Cache (the
// Snapshot, SetLocal), the watches feeding it and the dirty queue it feeds.
type MNP struct {
	*Cache
	core  kubernetes.Interface
	src   *sources
	queue *dirtyQueue
	rep   *reporter
	o     Options

	mu      sync.Mutex
	syncErr error // why the policies cannot sync (nil: they can, or are)
}

// New builds the watches over core (pods, namespaces, discovery) and pc
// (MultiNetworkPolicies); Run starts them.
func New(core kubernetes.Interface, pc PolicyClient, o Options) *MNP {
	if o.Limits == (netpol.Limits{}) {
		o.Limits = netpol.DefaultLimits()
	}
	if o.PropagationDelay <= 0 {
		o.PropagationDelay = DefaultPropagationDelay
	}
	if o.Workers <= 0 {
		o.Workers = defaultWorkers
	}
	if o.ApplyTimeout <= 0 {
		o.ApplyTimeout = defaultApplyTimeout
	}
	if o.DiscoveryRetry <= 0 {
		o.DiscoveryRetry = 30 * time.Second
	}
	if o.Log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Log = logrus.NewEntry(l)
	}
	m := &MNP{Cache: newCache(o.Node, o.Limits), core: core, o: o, rep: newReporter(o.Node, o.Recorder, o.Observer)}
	m.queue = newDirtyQueue(o.Applier, o.Quarantiner, o.Observer, o.Log, o.PropagationDelay, o.ApplyTimeout, o.Workers, m.isLocal, nil)
	m.dirty = m.queue.mark
	m.src = newSources(m.Cache, core, pc, m.policyEvent)
	return m
}

func (m *MNP) policyEvent(old, cur *cachedPolicy) {
	m.applyPolicy(old, cur)
	if old != nil {
		var p *netpol.Policy
		if cur != nil {
			p = cur.policy
		}
		m.rep.policyChanged(old.Namespace, old.Name, p)
	}
	if cur != nil && cur.policy.Oversize {
		m.rep.noted(cur.policy, []netpol.Note{{Namespace: cur.Namespace, Policy: cur.Name, Reason: "Oversize",
			Message: cur.why + ": the policy isolates the pods it selects and allows nothing"}})
	}
}

func (m *MNP) isLocal(id string) bool {
	m.Cache.mu.Lock()
	defer m.Cache.mu.Unlock()
	return m.local[id] != nil
}

// Run runs the watches and the queue until ctx ends. Once every cache
// synced, every local sandbox is re-rendered (its deny-all table, if it
// got one, gives way to its rules).
func (m *MNP) Run(ctx context.Context) {
	go m.src.run(ctx, discoveryOf(m.core.Discovery()), m.o.DiscoveryRetry, m.o.Log, m.setSyncErr)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), m.Synced) {
			m.o.Log.Info("MultiNetworkPolicy caches synced")
			m.markAll()
		}
	}()
	m.queue.run(ctx)
}

func (m *MNP) setSyncErr(err error) {
	m.mu.Lock()
	m.syncErr = err
	m.mu.Unlock()
}

// SyncError says why the caches cannot sync (ErrCRDNotServed, a discovery
// failure), or nil.
func (m *MNP) SyncError() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncErr
}

// errNotSynced is WaitForSync's when ctx ends first.
var errNotSynced = errors.New("MultiNetworkPolicy caches not synced")

// WaitForSync waits until every cache synced or ctx ends.
func (m *MNP) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), m.Synced) {
		if err := m.SyncError(); err != nil {
			return errors.Join(errNotSynced, err)
		}
		return errNotSynced
	}
	return nil
}

// markAll marks every local sandbox dirty, and every sandbox the applier
// lists (SandboxLister; one not told by SetLocal yet is queued under an
// empty namespace).
func (m *MNP) markAll() {
	var listed []string
	if l, ok := m.o.Applier.(SandboxLister); ok {
		listed = l.PolicySandboxes()
	}
	out := map[string]string{}
	m.Cache.mu.Lock()
	for _, id := range listed {
		out[id] = ""
	}
	for id, sb := range m.local {
		out[id] = sb.namespace
	}
	m.Cache.mu.Unlock()
	m.notify(out)
}

// ForgetLocal drops a sandbox torn down (see Cache.ForgetLocal).
func (m *MNP) ForgetLocal(sandboxID string) {
	m.Cache.mu.Lock()
	sb := m.local[sandboxID]
	m.Cache.mu.Unlock()
	m.Cache.ForgetLocal(sandboxID)
	if sb != nil {
		m.queue.forget(sb.namespace, sb.id)
		m.rep.podGone(sb.uid)
	}
}

// Noted tells what a render noted about policies (invalid parts, caps
// hit): a Warning Event on each policy, once per generation and reason,
// and the invalid-policy gauge. Notes about a policy not cached are
// dropped.
func (m *MNP) Noted(notes []netpol.Note) {
	byPolicy := map[*netpol.Policy][]netpol.Note{}
	m.Cache.mu.Lock()
	for _, n := range notes {
		if st := m.policies[n.Namespace][n.Policy]; st != nil {
			byPolicy[st.p] = append(byPolicy[st.p], n)
		}
	}
	m.Cache.mu.Unlock()
	for p, ns := range byPolicy {
		m.rep.noted(p, ns)
	}
}

// NotSynced tells a pod its covered interfaces got the deny-all table
// because the caches had not synced (once per pod).
func (m *MNP) NotSynced(pod LocalPod) {
	why := "waiting for the first lists"
	if err := m.SyncError(); err != nil {
		why = err.Error()
	}
	m.rep.notSynced(pod, why)
}
