package attach

// Background attaches. A runtime serialises its NRI calls node-wide
// (containerd's and CRI-O's NRI adaptation hold one lock over every event),
// so a CNI chain run inside RunPodSandbox delays every other pod's sandbox on
// the node: in a storm of 100 pods the chains' times add up (make bench,
// section density). With backgroundAttach the runtime adapter hands the
// attach to the Manager's Background().Start and answers at once; the chains
// of many pods run in parallel, off the runtime's lock, and the pod's first
// container waits for its pod's attach (Background().Wait, from NRI
// CreateContainer), so no container of the pod is created before its
// networks are there.
//
// Node-wide, the attaches share a few slots (slots.go): those waiting take
// them namespace by namespace in turn (FIFO within one), and one namespace
// never holds every slot, so a tenant queueing many slow or failing
// attaches delays its own pods, not the others'. A pod's budget
// (BackgroundAttachBudget) starts when it has a slot; its wait for one is
// bounded apart (BackgroundQueueWait), and for a pod whose container waits
// in the await hook by the hook's deadline (Urgent: rescued beside the
// slots in time).
//
// Contract, per sandbox id (on top of the package's):
//   - at most one background attach is queued or in flight; a second start
//     is a no-op;
//   - a Detach cancels the one queued or in flight and waits for it to end
//     (its rollback included) before tearing down, so a sandbox stopped
//     before its attach ran is never attached afterwards;
//   - a success is forgotten at once (a container created later finds the
//     record); a failure — a wait for a slot given up on included — is kept
//     until Wait reports it, once (a later wait finds nothing and the caller
//     attaches again, as for a pod created while nri-cni was away), or the
//     sandbox is torn down.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/state"
)

// Bounds of background attaches.
const (
	// BackgroundAttachBudget bounds one pod's background attach from the
	// moment it has a slot (every CNI call is bounded by cniTimeout
	// besides). The wait for the slot does not count.
	BackgroundAttachBudget = 30 * time.Second
	// BackgroundQueueWait bounds a pod's wait for a slot: then its attach
	// fails with ErrNoAttachSlot, reported on the pod, and the kubelet's
	// retry queues it again. Four budgets: with the slots shared by
	// namespace in turn, a pod waits longer only on a node whose slots
	// many namespaces keep busy at once.
	BackgroundQueueWait = 4 * BackgroundAttachBudget
	// backgroundSlots is how many pods' attaches run at once: enough to
	// overlap plugin execs and I/O, few enough not to starve the runtime
	// and the kubelet on a small node.
	backgroundSlots = 4
	// backgroundShare is the most slots one namespace holds at once: one
	// is always kept for the other namespaces.
	backgroundShare = backgroundSlots - 1
	// rollbackHold bounds how long a failed attach keeps its slot after
	// its budget, while its rollback ends.
	rollbackHold = BackgroundAttachBudget
	// RescueMargin: an attach a container waits for (Urgent) that still
	// waits for a slot when only its budget and this margin are left
	// before the container's deadline runs beside the slots (slots.go), so
	// it ends before the deadline even if it takes its whole budget.
	RescueMargin = 5 * time.Second
)

// ErrAttachPending: the pod's background attach did not end before the
// runtime's deadline; the runtime's caller retries (the kubelet retries
// CreateContainer).
var ErrAttachPending = errors.New("the pod's networks are still being attached; retry")

// inflight is one sandbox's background attach.
type inflight struct {
	done   chan struct{} // closed when the attach ended
	err    error         // its outcome, set before done is closed
	cancel context.CancelFunc
	queued time.Time    // when it started waiting for a slot
	slot   atomic.Int64 // when it got one (unix ns; 0: still waiting)
	// rescue is closed when a container of the pod can wait no longer
	// (Urgent); urge arms it once.
	rescue chan struct{}
	urge   sync.Once
}

// Background runs a Manager's background attaches and tracks those queued
// or in flight. Its lock is held only to find, add or drop an entry, never
// across an attach or a wait for a slot.
type Background struct {
	m        *Manager
	mu       sync.Mutex
	inflight map[string]*inflight
	slots    *slots
	wg       sync.WaitGroup
	// budget, maxWait, hold, rescue: BackgroundAttachBudget,
	// BackgroundQueueWait, rollbackHold, RescueMargin (shorter in tests).
	budget, maxWait, hold, rescue time.Duration
}

func newBackground(m *Manager) *Background {
	return &Background{m: m, inflight: map[string]*inflight{}, slots: newSlots(backgroundSlots, backgroundShare),
		budget: BackgroundAttachBudget, maxWait: BackgroundQueueWait, hold: rollbackHold, rescue: RescueMargin}
}

// Start starts sb's attach in the background and returns at once (false
// when one is queued or in flight already). The attach waits for a slot
// (its namespace's turn, at most BackgroundQueueWait), then runs as Attach
// does, bounded by BackgroundAttachBudget from then on.
func (b *Background) Start(sb Sandbox) bool { return b.start(sb, false) }

// Ensure is EnsureAttached's background form, for a container
// about to be created whose pod has no background attach to wait for (its
// attach failed and was reported, or the pod was created while nri-cni was
// away): by the same rules, it starts the attach in the background — as
// AttachIfAbsent — unless the pod is known, gets no networks or has one
// queued or in flight already; the caller then waits for it (Wait). A chain
// slower than the runtime's request deadline thus attaches on a retry too,
// which an attach in line could never do.
func (b *Background) Ensure(ctx context.Context, sb Sandbox, pidless bool) (started bool, err error) {
	if need, err := b.m.needsAttach(ctx, sb, pidless); !need || err != nil {
		return false, err
	}
	b.start(sb, true)
	return true, nil
}

func (b *Background) start(sb Sandbox, ifAbsent bool) bool {
	// Cancelled by a Detach (cancel); the budget is set once a slot is had.
	qctx, cancel := context.WithCancel(context.Background())
	f := &inflight{done: make(chan struct{}), cancel: cancel, queued: time.Now(), rescue: make(chan struct{})}
	b.mu.Lock()
	if _, ok := b.inflight[sb.ID]; ok {
		b.mu.Unlock()
		cancel()
		return false
	}
	b.inflight[sb.ID] = f
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		defer cancel()
		b.run(qctx, f, sb, ifAbsent)
	}()
	return true
}

// run is one background attach: the wait for a slot, then the attach on
// the budget, then (failed) the slot is kept while its rollback ends.
func (b *Background) run(qctx context.Context, f *inflight, sb Sandbox, ifAbsent bool) {
	m := b.m
	log := m.logFor(sb).WithFields(logrus.Fields{"event": "RunPodSandbox", "background": true})
	release, rescued, err := b.slots.acquire(qctx, slotKey(sb), b.maxWait, f.rescue)
	if err != nil {
		f.err = fmt.Errorf("%s: background attach: %w", PodRef(sb), err)
		if errors.Is(err, ErrNoAttachSlot) {
			log.WithError(f.err).Error("attach not started: the node's attach slots stayed busy; the kubelet's retry queues it again")
			m.report.failed(sb, "", f.err)
		}
		close(f.done)
		return
	}
	defer release()
	start := time.Now()
	f.slot.Store(start.UnixNano())
	if rescued {
		log.WithFields(logrus.Fields{"queued": start.Sub(f.queued).Round(time.Millisecond), "slots": b.slots.stats()}).
			Warn("attach rescued: a container of the pod waits for it and other namespaces' attaches hold the node's slots; " +
				"it runs beside them so that the container's start does not fail for their sake")
	}
	ctx, cancelBudget := context.WithTimeout(qctx, b.budget)
	defer cancelBudget()
	var rec *state.Record
	rec, f.err = m.attach(ctx, sb, ifAbsent)
	if errors.Is(f.err, ErrKnown) {
		f.err = nil // attached meanwhile (the resync)
	}
	log = log.WithFields(logrus.Fields{"queued": start.Sub(f.queued).Round(time.Millisecond),
		"duration": time.Since(start).Round(time.Microsecond)})
	switch {
	case f.err != nil:
		log.WithError(f.err).Error("attach failed: the pod's containers are not created until it attaches")
	case rec != nil:
		log.WithField("networks", len(rec.Networks)).Info("attached")
	}
	if f.err == nil {
		// Nothing to report: a container created later finds the record.
		b.drop(sb.ID, f)
		close(f.done)
		return
	}
	close(f.done)
	// A rollback still running past the budget (attach hands it the
	// sandbox's lock) keeps the slot: a namespace's failing attaches hold
	// no more of the node's CNI work than its share. Not for an attach
	// that never had the lock, nor one a Detach cancelled.
	if !errors.Is(f.err, ErrBusy) && qctx.Err() == nil {
		if unlock, err := m.locks.sandbox(context.Background(), sb.ID, b.hold, 0); err == nil {
			unlock()
		}
	}
}

// slotKey is whose share of the slots sb's attach takes: its namespace.
func slotKey(sb Sandbox) string { return sb.Pod.Namespace }

// Stats tells how busy the background attaches' slots are.
func (b *Background) Stats() BackgroundStats { return b.slots.stats() }

// drop forgets id's entry if it is still f.
func (b *Background) drop(id string, f *inflight) {
	b.mu.Lock()
	if b.inflight[id] == f {
		delete(b.inflight, id)
	}
	b.mu.Unlock()
}

// Wait waits for sb's background attach, if there is one, until
// ctx's deadline less the margin, and returns its outcome (found false: no
// background attach of sb was queued, in flight or uncollected). Still
// waiting or running at the deadline: ErrAttachPending (saying how long it
// has waited for a slot, if it still does), and the attach goes on.
func (b *Background) Wait(ctx context.Context, id string) (found bool, err error) {
	b.mu.Lock()
	f, ok := b.inflight[id]
	b.mu.Unlock()
	if !ok {
		return false, nil
	}
	wctx, cancel := b.beforeDeadline(ctx)
	defer cancel()
	select {
	case <-f.done:
	case <-wctx.Done():
		return true, f.pending(b.slots)
	}
	b.drop(id, f)
	return true, f.err
}

// pending is ErrAttachPending for f, saying how long it has waited for a
// slot if it still does.
func (f *inflight) pending(s *slots) error {
	if f.slot.Load() != 0 {
		return ErrAttachPending
	}
	st := s.stats()
	return fmt.Errorf("%w (queued %s for one of the node's %d attach slots: %d attaches of %d namespaces waiting)",
		ErrAttachPending, time.Since(f.queued).Round(time.Second), st.Slots, st.Waiting, st.Namespaces)
}

// Urgent tells id's background attach, if it still waits for a slot,
// that a container of its pod waits for it until deadline (the await hook,
// which fails the container's start then: for a pod with restartPolicy
// Never, for good). Once only its budget and RescueMargin are left before
// deadline, the attach stops waiting for its namespace's turn: it runs
// beside the node's slots unless its namespace holds one already (slots.go).
// So a pod's container never fails to start because other namespaces keep
// the slots busy. The first call's deadline counts (a pod's first container
// asks first).
func (b *Background) Urgent(id string, deadline time.Time) {
	b.mu.Lock()
	f, ok := b.inflight[id]
	b.mu.Unlock()
	if !ok || f.slot.Load() != 0 {
		return
	}
	after := time.Until(deadline) - b.budget - b.rescue
	f.urge.Do(func() {
		if after <= 0 {
			close(f.rescue)
			return
		}
		time.AfterFunc(after, func() { close(f.rescue) })
	})
}

// Poll is Wait without waiting: pending while id's background attach is
// queued or runs; once it ended, its outcome (a failure is reported once,
// as by Wait); neither when none is queued, in flight or uncollected.
func (b *Background) Poll(id string) (pending bool, err error) {
	b.mu.Lock()
	f, ok := b.inflight[id]
	b.mu.Unlock()
	if !ok {
		return false, nil
	}
	select {
	case <-f.done:
		b.drop(id, f)
		return false, f.err
	default:
		return true, nil
	}
}

// cancel cancels sb's background attach, if one is queued or in flight
// (a queued one gives up its place at once), and waits for it to end (its rollback included) or ctx, whichever comes
// first. Its entry is dropped: the sandbox is going away.
func (b *Background) cancel(ctx context.Context, id string) {
	b.mu.Lock()
	f, ok := b.inflight[id]
	delete(b.inflight, id)
	b.mu.Unlock()
	if !ok {
		return
	}
	f.cancel()
	wctx, cancel := b.beforeDeadline(ctx)
	defer cancel()
	select {
	case <-f.done:
	case <-wctx.Done():
	}
}

// beforeDeadline is ctx ending the margin before its deadline: waiting
// stops in time for the runtime to get its answer.
func (b *Background) beforeDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, d.Add(-b.m.margin))
	}
	return context.WithCancel(ctx)
}

// PlanFirst plans sb as Attach would (planning only: no namespace, no CNI)
// and tells what Attach would: a refusal is reported (the pod's Warning
// Event) and returned, a pod that gets nothing is logged with the reason
// (skip true). A runtime adapter starting a background attach plans first,
// so a pod whose request is wrong fails at once, as with an attach in line.
func (b *Background) PlanFirst(ctx context.Context, sb Sandbox) (skip bool, err error) {
	m := b.m
	p, err := m.planner.Plan(ctx, m.pod(sb))
	if err != nil {
		err = fmt.Errorf("%s: %w", PodRef(sb), err)
		m.report.failed(sb, "", err)
		return false, err
	}
	if p.Skip != "" {
		m.logSkip(m.logFor(sb), p.Skip)
		return true, nil
	}
	return false, nil
}

// WaitIdle waits until no background attach runs (tests, and a clean
// shutdown).
func (b *Background) WaitIdle() { b.wg.Wait() }
