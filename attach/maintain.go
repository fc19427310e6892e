package attach

// The engine's side of the reconcilers (package reconcile drives them): one
// sandbox at a time, each under its lock taken with a bounded wait
// (BackgroundLockWait) so a stuck sandbox is skipped, never waited for.
//   - A record whose sandbox is gone is torn down and dropped (Collect).
//   - An unreadable record fails closed: it is rebuilt from libcni's cache
//     (nri-cni marks what it ADDs, NetworkAttachmentDefinitions included)
//     and judged like any record: kept (and rewritten) while its sandbox
//     lives, torn down when it is gone. Nothing of it is DELed while the
//     sandbox lives.
//   - A cached attachment of nri-cni's that no record claims is DELed under
//     its sandbox's lock, after checking again that no record claims it (an
//     attach records before it ADDs, under that lock).
//   - libcni's GC (CNI 1.1 GC with the attachments still valid) must not
//     overlap any ADD or DEL: it runs under the exclusive GC lock, polled
//     for, never queued for, and skipped if it does not come in time.
//   - CHECK compares an attachment with what its ADD set up, and reports
//     drift; it never repairs (a new ADD could change the pod's address).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// gcExclusiveWait bounds the wait for the exclusive GC lock (libcni's GC).
const gcExclusiveWait = 2 * time.Second

// LiveFunc reports whether the sandbox of rec still exists.
type LiveFunc func(rec *state.Record) bool

// Outcome is what Collect did with a sandbox.
type Outcome int

// Outcomes of Collect.
const (
	Kept     Outcome = iota // its sandbox lives
	TornDown                // gone: torn down and dropped
	Repaired                // an unreadable record of a live sandbox, rebuilt from libcni's cache
	Busy                    // another operation held it: skipped this time
	Vanished                // no record any more (torn down meanwhile)
	Failed                  // the teardown failed: kept for the next pass
)

// Collect tears down and drops the record of id if, under its lock, live
// says its sandbox is gone; an unreadable record is rebuilt from libcni's
// cache first (and kept, rewritten, if its sandbox lives).
func (m *Manager) Collect(ctx context.Context, id string, live LiveFunc) (Outcome, error) {
	release, err := m.locks.sandbox(ctx, id, BackgroundLockWait, m.margin)
	if err != nil {
		return Busy, nil
	}
	defer release()
	rec, err := m.store.Get(id)
	repairing := false
	switch {
	case errors.Is(err, state.ErrNotFound):
		return Vanished, nil
	case err != nil:
		if rec, err = m.cni.rebuild(id); err != nil {
			// Kept as it is: never DEL what may be live.
			return Failed, fmt.Errorf("unreadable record of %s, and libcni's cache could not rebuild it: %w", id, err)
		}
		repairing = true
	}
	log := m.log.WithFields(logrus.Fields{"sandbox": rec.ID, "pod": rec.Name, "namespace": rec.Namespace})
	if live(rec) {
		if !repairing {
			return Kept, nil
		}
		if err := m.store.Delete(id); err == nil {
			err = m.store.Put(rec)
		}
		if err != nil {
			return Failed, fmt.Errorf("rewriting the record of %s: %w", id, err)
		}
		log.WithField("networks", len(rec.Networks)).Warn("gc: unreadable record of a live sandbox rebuilt from libcni's cache")
		return Repaired, nil
	}
	if rec.Phase != state.PhaseTornDown {
		if err := m.cni.teardown(ctx, log, rec, ""); err != nil {
			return Failed, fmt.Errorf("sandbox %s: %w", rec.ID, err)
		}
	}
	if err := m.store.Delete(rec.ID); err != nil {
		return Failed, err
	}
	m.pol.forget(rec.ID, rec.UID)
	if repairing {
		log.Info("gc: stale sandbox with an unreadable record torn down from libcni's cache")
	} else {
		log.Info("gc: stale sandbox torn down")
	}
	return TornDown, nil
}

// CollectCached DELs (empty netns) nri-cni's cached attachments of
// sandboxes no record (readable or not) names, each sandbox under its
// lock. It returns how many it DELed and how many sandboxes were busy.
func (m *Manager) CollectCached(ctx context.Context) (deleted, busy int, errs []error) {
	atts, err := m.cni.engine.CachedAttachments("")
	if err != nil {
		return 0, 0, nil
	}
	type stale struct{ network, ifname string }
	ours := m.cni.oursFilter()
	byID := map[string][]stale{}
	var order []string
	for _, att := range atts {
		if _, ok := ours(att); !ok {
			continue
		}
		if _, err := m.store.Get(att.ContainerID); !errors.Is(err, state.ErrNotFound) {
			continue // a record (or an unreadable one) claims it
		}
		if byID[att.ContainerID] == nil {
			order = append(order, att.ContainerID)
		}
		byID[att.ContainerID] = append(byID[att.ContainerID], stale{network: att.Network, ifname: att.IfName})
	}
	for _, id := range order {
		release, err := m.locks.sandbox(ctx, id, BackgroundLockWait, m.margin)
		if err != nil {
			busy++
			continue
		}
		if _, err := m.store.Get(id); errors.Is(err, state.ErrNotFound) {
			for _, a := range byID[id] {
				if err := m.cni.del(ctx, a.network, cni.Attachment{ContainerID: id, IfName: a.ifname}); err != nil {
					errs = append(errs, fmt.Errorf("gc: cached attachment %s/%s: %w", id, a.ifname, err))
					continue
				}
				m.log.WithFields(logrus.Fields{"sandbox": id, "network": a.network, "ifname": a.ifname}).
					Info("gc: stale cached attachment detached")
				deleted++
			}
		}
		release()
	}
	return deleted, busy, errs
}

// PluginGC runs libcni's GC for every loaded network, under the exclusive
// GC lock, with every attachment a record (or an unreadable record's
// cache) still claims as valid. skipped: the lock did not come in time.
func (m *Manager) PluginGC(ctx context.Context) (skipped bool, errs []error) {
	release := m.locks.exclusive(ctx, gcExclusiveWait)
	if release == nil {
		m.log.Info("gc: libcni's GC skipped this pass: ADDs or DELs kept running")
		return true, nil
	}
	defer release()
	valid := map[types.GCAttachment]bool{}
	recs, listErrs := m.store.List() // stable: records change only under the shared GC lock
	for _, rec := range recs {
		if rec.Phase == state.PhaseTornDown {
			continue
		}
		for _, n := range rec.Networks {
			valid[types.GCAttachment{ContainerID: rec.ID, IfName: n.IfName}] = true
		}
	}
	for _, err := range listErrs {
		var re *state.RecordError
		if !errors.As(err, &re) {
			continue
		}
		atts, _ := m.cni.engine.CachedAttachments(re.ID)
		for _, att := range atts {
			valid[types.GCAttachment{ContainerID: att.ContainerID, IfName: att.IfName}] = true
		}
	}
	validList := make([]types.GCAttachment, 0, len(valid))
	for a := range valid {
		validList = append(validList, a)
	}
	for _, n := range m.cni.engine.Networks() {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CNITimeout.D())
		err := m.cni.engine.GC(cctx, n, validList)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("gc: network %q: %w", n.Name, err))
		}
	}
	return false, errs
}

// CheckObserver, when the Observer implements it, learns every failed
// CHECK (metrics).
type CheckObserver interface {
	CheckFailed(network string)
}

// Check CHECKs every attached network of id's record once (CNI CHECK with
// the config libcni cached at its ADD), under its lock; a failure is
// logged, observed and reported as drift. busy: the sandbox was held.
//
// A teardown of the sandbox cancels it (runningChecks): CHECK only reports,
// and a Stop waiting behind it would miss the runtime's deadline and DEL
// later, without the netns, when bridge no longer removes its ipMasq rules.
func (m *Manager) Check(ctx context.Context, id string) (checked, failed int, busy bool) {
	ctx, done := m.checks.start(ctx, id)
	defer done()
	release, err := m.locks.sandbox(ctx, id, BackgroundLockWait, m.margin)
	if err != nil {
		return 0, 0, ctx.Err() == nil
	}
	defer release()
	rec, err := m.store.Get(id) // as it is now, under the lock
	if err != nil || rec.Phase != state.PhaseAttached {
		return 0, 0, false
	}
	nsPath := m.cni.usableNetns(rec)
	if nsPath == "" {
		return 0, 0, false // the netns is gone: the watcher or Stop tears it down
	}
	log := m.log.WithFields(logrus.Fields{"sandbox": rec.ID, "pod": rec.Name, "namespace": rec.Namespace})
	for _, n := range rec.Networks {
		if n.Pending {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CNITimeout.D())
		err := m.cni.engine.Check(cctx, n.Name, cni.Attachment{ContainerID: rec.ID, IfName: n.IfName, Netns: nsPath})
		cancel()
		if ctx.Err() != nil {
			break // cancelled (a teardown of the sandbox): nothing to report
		}
		checked++
		if err == nil || errors.Is(err, cni.ErrNoCachedConfig) {
			continue
		}
		failed++
		name := n.NAD
		if name == "" {
			name = n.Name
		}
		log.WithFields(logrus.Fields{"network": n.Name, "ifname": n.IfName}).WithError(err).
			Warn("CNI CHECK failed: the attachment drifted from what its ADD set up (not repaired)")
		if co, ok := m.cni.obs.(CheckObserver); ok {
			co.CheckFailed(m.cni.metricsLabel(n.Name))
		}
		m.report.drift(rec, name, fmt.Errorf("interface %s: %w", n.IfName, err))
	}
	// MultiNetworkPolicy: the table's marker against the record.
	if m.pol.checkPolicy(ctx, log, rec) {
		failed++
	}
	return checked, failed, false
}

// ReportLive reports the network status of every listed pod nri-cni has an
// attached record of (after a resync: a restarted nri-cni, or a status write
// lost earlier, is caught up), but not a status known written as it is
// (StatusWritten): a restart of every node must not rewrite every running
// pod's network-status.
func (m *Manager) ReportLive(live []Sandbox) {
	if m.report.sink == nil {
		return
	}
	for _, sb := range live {
		if rec, err := m.store.Get(sb.ID); err == nil && rec.Phase == state.PhaseAttached {
			m.report.resynced(sb, rec)
		}
	}
}

// StatusWritten records that pn, a pod's network-status, was written to the
// API server: a resync (nri-cni restarted: every running pod listed again)
// does not write it again while it would write the same. The status sink's
// writer calls it, off the runtime's requests. A sandbox busy for longer
// than BackgroundLockWait, or no longer attached, is not recorded: its
// status is written again at the next resync, as it was before.
func (m *Manager) StatusWritten(pn PodNetworks) {
	if pn.SandboxID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), BackgroundLockWait)
	defer cancel()
	release, err := m.locks.sandbox(ctx, pn.SandboxID, BackgroundLockWait, 0)
	if err != nil {
		return
	}
	defer release()
	rec, err := m.store.Get(pn.SandboxID)
	if err != nil || rec.Phase != state.PhaseAttached || rec.UID != pn.UID {
		return
	}
	// The digest of what was written: a later change of the record (a
	// hot-plug) reports a status of another digest, written at a resync.
	d := pn.Digest()
	if rec.StatusDigest == d {
		return
	}
	rec.StatusDigest = d
	if err := m.store.Put(rec); err != nil {
		m.log.WithError(err).WithField("sandbox", pn.SandboxID).Warn("recording the written network-status failed; a resync writes it again")
	}
}

// runningChecks are the drift CHECKs in flight, by sandbox id: a teardown
// cancels its sandbox's, and none starts while one runs, so that its wait
// for the sandbox's lock ends at once instead of at the runtime's deadline.
type runningChecks struct {
	mu      sync.Mutex // guards m and tearing
	m       map[string]*runningCheck
	tearing map[string]int // teardowns of the sandbox waiting or running
}

type runningCheck struct{ cancel context.CancelFunc }

// start registers a CHECK of id (cancelled at once while id is torn down);
// done unregisters it.
func (r *runningChecks) start(ctx context.Context, id string) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	c := &runningCheck{cancel: cancel}
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]*runningCheck{}
	}
	r.m[id] = c
	if r.tearing[id] > 0 {
		cancel()
	}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		if r.m[id] == c {
			delete(r.m, id)
		}
		r.mu.Unlock()
		cancel()
	}
}

// teardown cancels id's CHECK, if one runs, and keeps new ones from
// running until done.
func (r *runningChecks) teardown(id string) (done func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tearing == nil {
		r.tearing = map[string]int{}
	}
	r.tearing[id]++
	if c := r.m[id]; c != nil {
		c.cancel()
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.tearing[id]--; r.tearing[id] <= 0 {
			delete(r.tearing, id)
		}
	}
}

// ReportStartedWithout reports s loudly: an error in the log, a Warning
// Event (Kubernetes mode) and the metric.
func (m *Manager) ReportStartedWithout(s StartedWithout) {
	m.log.WithFields(logrus.Fields{"pod": s.Name, "namespace": s.Namespace, "sandbox": s.SandboxID,
		"containers": s.Containers, "attachedNow": s.Attached, "restarting": s.Restarting}).
		Error("containers of this pod started before its networks were attached: nri-cni was not serving and the node's runtime did not refuse them (set it up to fail closed: deploy/node)")
	if sink, ok := m.report.sink.(StartedWithoutSink); ok && m.report.sink != nil {
		sink.StartedWithoutNetworks(s)
	}
	if obs, ok := m.cni.obs.(StartedObserver); ok && m.cni.obs != nil {
		obs.StartedWithoutNetworks(len(s.Containers))
	}
}

// ReadinessObserver, when the engine's Observer implements it, learns each
// network's readiness (metrics).
type ReadinessObserver interface {
	NetworkReady(network string, ready bool)
}

// NetworkReadiness is one network's last CNI STATUS answer.
type NetworkReadiness struct {
	Network string
	Ready   bool
	Reason  string // the plugin's message when not ready
}

// CheckNetworks asks every loaded network for CNI STATUS now (each within
// cniTimeout), records the answers for planning (a network not ready fails
// the pods that need it at once) and for the observer, and returns them
// sorted by network, with the networks whose readiness changed: those not
// ready now with their error, those ready again with nil.
func (m *Manager) CheckNetworks(ctx context.Context) ([]NetworkReadiness, map[string]error) {
	nets := m.cni.engine.Networks()
	notReady := map[string]error{}
	out := make([]NetworkReadiness, 0, len(nets))
	ro, _ := m.cni.obs.(ReadinessObserver)
	for _, n := range nets {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CNITimeout.D())
		err := m.cni.engine.Status(cctx, n)
		cancel()
		r := NetworkReadiness{Network: n.Name, Ready: err == nil}
		if err != nil {
			notReady[n.Name], r.Reason = err, err.Error()
		}
		out = append(out, r)
		if ro != nil {
			ro.NetworkReady(n.Name, err == nil)
		}
	}
	before := m.ready.Set(notReady)
	changed := map[string]error{}
	for name, err := range notReady {
		if before[name] == nil {
			changed[name] = err
		}
	}
	for name := range before {
		if notReady[name] == nil {
			changed[name] = nil
		}
	}
	slices.SortFunc(out, func(a, b NetworkReadiness) int { return strings.Compare(a.Network, b.Network) })
	return out, changed
}

// ApplyPolicy renders sandbox id's MultiNetworkPolicy rules again and
// programs them when the digest differs from the record's or from the
// table's marker, or interfaces are quarantined (they come up again). The
// wait for another operation on the sandbox is bounded
// (BackgroundLockWait): ErrBusy, which kube's queue requeues on. No
// attached record, or its netns gone: nothing to do. Off: nil at once.
func (m *Manager) ApplyPolicy(ctx context.Context, id string) error { return m.pol.apply(ctx, id) }

// Quarantine sets the interfaces sandbox id's MultiNetworkPolicy rules
// cover down (every recorded one if they cannot be rendered), records them
// and raises a ReasonPolicyNotEnforced Warning Event: what kube's queue
// does when reprogramming keeps failing, since the rules in place may be
// more open than the policies now say. The next successful ApplyPolicy
// sets them up again. Its lock is waited for as ApplyPolicy's (ErrBusy).
func (m *Manager) Quarantine(ctx context.Context, id string) error { return m.pol.quarantine(ctx, id) }

// PolicySandboxes are the sandboxes whose MultiNetworkPolicy rules
// ApplyPolicy keeps: every attached pod record with networks (after a
// restart kube's queue takes them all once its caches synced; one never
// programmed, the feature just turned on, is programmed then). Nil when
// off.
func (m *Manager) PolicySandboxes() []string { return m.pol.sandboxes() }

// RemovePolicies is MultiNetworkPolicy turned off (an admin's act in
// nri.conf): every attached pod whose record says nri-cni programmed its
// table gets it deleted through fw, its quarantined interfaces set up
// again and the record's policy cleared, so the pod is as it would be
// without the feature and an upstream daemon can take over. links sets
// interfaces up (nil: netns.SetLinksUp). A pod busy past
// BackgroundLockWait is left for the next call (ErrBusy in err); removed
// counts the tables deleted.
func (m *Manager) RemovePolicies(ctx context.Context, fw Firewall, links func(path string, ifnames []string, up bool) error) (removed int, err error) {
	return removePolicies(ctx, m, fw, links)
}
