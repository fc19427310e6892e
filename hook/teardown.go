package hook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
)

// Detach DELs the sandbox's networks. final (RemovePodSandbox, poststop)
// also drops the record. It is idempotent: "already gone" is success. A
// failure keeps the record and schedules a background retry with backoff
// (retry.go); a later success cancels it.
//
// Waiting for another operation on the sandbox ends at ctx's deadline (less
// the margin): then the teardown is scheduled for a retry like a failed one
// and ErrBusy returned, so the runtime's Stop is answered in time.
func (m *Manager) Detach(ctx context.Context, sb Sandbox, final bool) error {
	_, err := m.detachReporting(ctx, sb, final, 0)
	return err
}

// detachReporting is Detach, also saying whether it tore a recorded
// attachment down just now (false: a record already torn down, or none), so
// the caller logs what really happened (the netns watcher racing Stop).
// lockWait, if > 0, bounds the wait for the sandbox's lock besides ctx (the
// background loops, whose ctx has no deadline).
func (m *Manager) detachReporting(ctx context.Context, sb Sandbox, final bool, lockWait time.Duration) (bool, error) {
	if err := state.ValidID(sb.ID); err != nil {
		return false, err
	}
	m.live.drop(sb.ID) // no hot-plug into a sandbox being stopped
	unlock, err := m.lockFor(ctx, sb.ID, lockWait)
	if err != nil {
		m.retries.failed(sb, final, time.Now())
		return false, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	defer func() { unlock(); m.gcMu.RUnlock() }()
	m.live.drop(sb.ID) // and none started while we waited
	tore, err := m.detach(ctx, sb, final)
	if err != nil {
		m.retries.failed(sb, final, time.Now())
		return false, err
	}
	m.retries.done(sb.ID)
	return tore, nil
}

func (m *Manager) detach(ctx context.Context, sb Sandbox, final bool) (tore bool, err error) {
	log := m.logFor(sb)
	rec, err := m.store.Get(sb.ID)
	if err != nil {
		if !errors.Is(err, state.ErrNotFound) {
			log.WithError(err).Warn("unreadable record: tearing down from the CNI cache")
		}
		// No (usable) record: nri-cni may have started after this sandbox.
		// DEL whatever libcni cached for it under our networks.
		nsPath := ""
		if sb.Pinned != "" && !final {
			if ns, err := m.ns.Check(sb.Pinned); err == nil {
				nsPath = ns.Path
			}
		}
		if err := m.delCached(ctx, log, sb.ID, nsPath); err != nil {
			return false, fmt.Errorf("%s: %w", podRef(sb), err)
		}
		if final && !errors.Is(err, state.ErrNotFound) {
			return false, m.store.Delete(sb.ID)
		}
		return false, nil
	}
	if rec.Phase != state.PhaseTornDown {
		if err := m.teardown(ctx, log, rec, m.usableNetns(rec)); err != nil {
			return false, fmt.Errorf("%s: %w", podRef(sb), err)
		}
		tore = true
		rec.Phase, rec.Updated = state.PhaseTornDown, time.Now().UTC()
		if !final {
			if err := m.store.Put(rec); err != nil {
				return tore, fmt.Errorf("%s: %w", podRef(sb), err)
			}
		}
	}
	if final {
		return tore, m.store.Delete(sb.ID)
	}
	return tore, nil
}

// usableNetns returns the recorded netns path if it still names the same,
// non-host namespace; otherwise "" (DEL with an empty netns, from the cache).
func (m *Manager) usableNetns(rec *state.Record) string {
	if rec.Netns == "" {
		return ""
	}
	ns, err := m.ns.Check(rec.Netns)
	if err != nil {
		return ""
	}
	if rec.NetnsIno != 0 && (ns.ID != netns.ID{Dev: rec.NetnsDev, Ino: rec.NetnsIno}) {
		return ""
	}
	return ns.Path
}

// teardown DELs rec's networks in reverse order (all at once with
// parallelAttach). A DEL that fails in the namespace is retried with an
// empty one, which still releases IPAM.
func (m *Manager) teardown(ctx context.Context, log *logrus.Entry, rec *state.Record, nsPath string) error {
	errs := make([]error, len(rec.Networks))
	one := func(i int) {
		n := rec.Networks[i]
		nl := log.WithFields(logrus.Fields{"network": n.Name, "ifname": n.IfName, "netns": nsPath})
		a := cni.Attachment{ContainerID: rec.ID, IfName: n.IfName, Netns: nsPath}
		fallback := m.nadFallback(n)
		err := m.delWith(ctx, n.Name, fallback, a)
		if err != nil && nsPath != "" {
			nl.WithError(err).Warn("CNI DEL in the namespace failed, retrying with an empty netns")
			a.Netns = ""
			err = m.delWith(ctx, n.Name, fallback, a)
		}
		if err != nil {
			nl.WithError(err).Error("CNI DEL failed")
			errs[i] = err
			return
		}
		nl.Info("network detached")
	}
	if !m.cfg.ParallelAttach || len(rec.Networks) < 2 {
		for i := len(rec.Networks) - 1; i >= 0; i-- {
			one(i)
		}
		return errors.Join(errs...)
	}
	var wg sync.WaitGroup
	for i := range rec.Networks {
		wg.Add(1)
		go func() { defer wg.Done(); one(i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// del runs one bounded DEL; "already gone" counts as done.
func (m *Manager) del(ctx context.Context, name string, a cni.Attachment) error {
	return m.delWith(ctx, name, nil, a)
}

// delWith is del with the network to use when libcni cached none for a (a
// NetworkAttachmentDefinition's, whose ADD failed part-way).
func (m *Manager) delWith(ctx context.Context, name string, fallback *cni.Network, a cni.Attachment) error {
	cctx, cancel, err := cni.Budget(ctx, m.cfg.CNITimeout.D(), m.margin)
	if err != nil {
		return fmt.Errorf("network %q: %w", name, err)
	}
	defer cancel()
	start := time.Now()
	err = m.engine.DelFallback(cctx, name, fallback, a)
	switch {
	case cni.IsAlreadyGone(err):
		err = nil
	case errors.Is(err, cni.ErrSkippedMissing):
		m.log.WithFields(logrus.Fields{"sandbox": a.ContainerID, "network": name, "ifname": a.IfName}).
			WithError(err).Warn("DEL done without the plugins whose binaries are missing")
		err = nil
	case err != nil && cctx.Err() != nil:
		err = fmt.Errorf("%w (timed out after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	m.observe("del", name, err, time.Since(start))
	return err
}
