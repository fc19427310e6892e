package attach

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
)

// Detach DELs the sandbox's networks. final (RemovePodSandbox, poststop)
// also drops the record. It is idempotent: "already gone" is success. A
// failure keeps the record and schedules a background retry with backoff
// (RetryTeardowns); a later success cancels it.
//
// Waiting for another operation on the sandbox ends at ctx's deadline (less
// the margin): then the teardown is scheduled for a retry like a failed one
// and ErrBusy returned, so the runtime's Stop is answered in time.
func (m *Manager) Detach(ctx context.Context, sb Sandbox, final bool) error {
	_, err := m.DetachWithin(ctx, sb, final, 0)
	return err
}

// DetachWithin is Detach, also saying whether it tore a recorded attachment
// down just now (false: a record already torn down, or none), so the caller
// logs what really happened (the netns watcher racing Stop). lockWait, if >
// 0, bounds the wait for the sandbox's lock besides ctx (the background
// loops, whose ctx has no deadline: BackgroundLockWait).
func (m *Manager) DetachWithin(ctx context.Context, sb Sandbox, final bool, lockWait time.Duration) (tore bool, _ error) {
	if err := state.ValidID(sb.ID); err != nil {
		return false, err
	}
	m.live.drop(sb.ID) // no hot-plug into a sandbox being stopped
	// A background attach still running is cancelled and waited for (its
	// rollback included): a sandbox stopped first is never attached after.
	m.bg.cancel(ctx, sb.ID)
	defer m.checks.teardown(sb.ID)() // a drift CHECK only reports: it yields
	release, err := m.locks.sandbox(ctx, sb.ID, lockWait, m.margin)
	if err != nil {
		m.retries.failed(sb, final, time.Now())
		return false, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	m.live.drop(sb.ID) // and none started while we waited
	if held := m.holdForStop(ctx, sb, final); held != nil {
		return m.detachHeld(ctx, sb, held, release)
	}
	defer release()
	tore, err = m.detach(ctx, sb, final, "")
	if err != nil {
		m.retries.failed(sb, final, time.Now())
		return false, err
	}
	m.retries.done(sb.ID)
	return tore, nil
}

func (m *Manager) detach(ctx context.Context, sb Sandbox, final bool, heldNetns string) (tore bool, err error) {
	log := m.logFor(sb)
	rec, err := m.store.Get(sb.ID)
	if err != nil {
		if !errors.Is(err, state.ErrNotFound) {
			log.WithError(err).Warn("unreadable record: tearing down from the CNI cache")
		}
		// No (usable) record: nri-cni may have started after this sandbox.
		// DEL whatever libcni cached for it of nri-cni's.
		nsPath := ""
		if sb.Pinned != "" && !final {
			if ns, err := m.ns.Check(sb.Pinned); err == nil {
				nsPath = ns.Path
			}
		}
		if err := m.cni.delCached(ctx, log, sb.ID, nsPath); err != nil {
			return false, fmt.Errorf("%s: %w", PodRef(sb), err)
		}
		m.pol.forget(sb.ID, sb.Pod.UID)
		if final && !errors.Is(err, state.ErrNotFound) {
			return false, m.store.Delete(sb.ID)
		}
		return false, nil
	}
	m.pol.forget(sb.ID, rec.UID) // the table dies with the netns: no netlink
	if rec.Phase != state.PhaseTornDown {
		nsPath := heldNetns
		if nsPath == "" {
			nsPath = m.cni.usableNetns(rec)
		}
		if err := m.cni.teardown(ctx, log, rec, nsPath); err != nil {
			return false, fmt.Errorf("%s: %w", PodRef(sb), err)
		}
		tore = true
		rec.Phase, rec.Updated = state.PhaseTornDown, time.Now().UTC()
		if !final {
			if err := m.store.Put(rec); err != nil {
				return tore, fmt.Errorf("%s: %w", PodRef(sb), err)
			}
		}
	}
	if final {
		return tore, m.store.Delete(sb.ID)
	}
	return tore, nil
}

// RetryTeardowns runs the teardown retries whose time has come (the netns
// watcher's loop calls it), each waiting at most BackgroundLockWait for its
// sandbox. A sandbox whose netns is gone is torn down for good (record
// dropped).
func (m *Manager) RetryTeardowns(ctx context.Context, now time.Time) {
	for _, r := range m.retries.due(now) {
		final := r.final
		if rec, err := m.store.Get(r.sb.ID); err == nil && m.cni.usableNetns(rec) == "" {
			final = true
		}
		log := m.logFor(r.sb).WithField("attempt", r.attempts+1)
		if _, err := m.DetachWithin(ctx, r.sb, final, BackgroundLockWait); err != nil {
			log.WithError(err).Warn("teardown retry failed; retrying later")
			continue
		}
		log.Info("teardown retry succeeded: networks released")
	}
}

// NetnsUsable returns rec's recorded netns path if it still names the same,
// non-host namespace; otherwise "".
func (m *Manager) NetnsUsable(rec *state.Record) string { return m.cni.usableNetns(rec) }

// A StopPodSandbox's teardown runs while the pod's namespace exists, but the
// runtime answers its NRI request deadline (containerd: 2 s) by going on
// without nri-cni: it removes the namespace's pin, and a DEL retried later
// runs with an empty netns, where a plugin skips what needs the namespace
// (bridge's ipMasq rule, found through the pod's address). Under load, a
// pod with several such networks did not finish in 2 s, and the masquerade
// rule stayed on the node.
//
// So a Stop holds the namespace open (an fd: it lives while held, whatever
// the runtime does to its pin) and DELs in it under the held path. If the
// DELs finish before the request's deadline, the answer is as before. If
// not, the runtime gets its answer in time (ErrTeardownContinues) and the
// DELs go on in the same namespace, up to HeldTeardownBudget, holding the
// sandbox's lock (a RemovePodSandbox meanwhile waits, or is retried); then
// the namespace is released. A failure is retried as any failed teardown.

// HeldTeardownBudget bounds a Stop's teardown that goes on past the
// runtime's deadline.
const HeldTeardownBudget = 2 * time.Minute

// ErrTeardownContinues: the runtime's deadline came first; the teardown goes
// on in the background in the pod's namespace, which nri-cni holds open.
var ErrTeardownContinues = errors.New("teardown goes on past the runtime's deadline, in the pod's network namespace (held open)")

// holdForStop holds sb's recorded namespace for a Stop (not final) whose
// record has networks to tear down and whose ctx has a deadline (a runtime
// request); nil otherwise (torn down already, no namespace, nothing to
// hold: the teardown runs as before).
func (m *Manager) holdForStop(ctx context.Context, sb Sandbox, final bool) *netns.Held {
	if final {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil
	}
	rec, err := m.store.Get(sb.ID)
	if err != nil || rec.Phase == state.PhaseTornDown || len(rec.Networks) == 0 {
		return nil
	}
	path := m.cni.usableNetns(rec)
	if path == "" {
		return nil
	}
	held, err := m.ns.Hold(path, netns.ID{Dev: rec.NetnsDev, Ino: rec.NetnsIno})
	if err != nil {
		m.logFor(sb).WithError(err).Debug("network namespace not held: tearing down in the runtime's request")
		return nil
	}
	return held
}

// detachHeld tears sb down in the held namespace; release (the sandbox's
// lock) and the namespace go when the teardown ends, which may be after
// this returns.
func (m *Manager) detachHeld(ctx context.Context, sb Sandbox, held *netns.Held, release func()) (bool, error) {
	type outcome struct {
		tore bool
		err  error
	}
	done := make(chan outcome, 1)
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HeldTeardownBudget)
	start := time.Now()
	go func() {
		var o outcome
		func() { // the namespace, the lock and the budget go before the answer
			defer cancel()
			defer release()
			defer held.Release()
			o.tore, o.err = m.detach(bctx, sb, false, held.Path)
			if o.err != nil {
				m.retries.failed(sb, false, time.Now())
			} else {
				m.retries.done(sb.ID)
			}
		}()
		done <- o
	}()
	wait, wcancel := context.WithCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		wait, wcancel = context.WithDeadline(ctx, d.Add(-m.margin))
	}
	defer wcancel()
	select {
	case o := <-done:
		return o.tore, o.err
	case <-wait.Done():
	}
	log := m.logFor(sb).WithField("budget", HeldTeardownBudget)
	go func() {
		o := <-done
		l := log.WithField("duration", time.Since(start).Round(time.Millisecond))
		if o.err != nil {
			l.WithError(o.err).Error("teardown past the runtime's deadline failed: the record is kept and the teardown retried")
			return
		}
		l.Info("teardown past the runtime's deadline done, in the pod's network namespace")
	}()
	return false, fmt.Errorf("%s: %w", PodRef(sb), ErrTeardownContinues)
}
