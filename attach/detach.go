package attach

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		if final && !errors.Is(err, state.ErrNotFound) {
			return false, m.store.Delete(sb.ID)
		}
		return false, nil
	}
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
