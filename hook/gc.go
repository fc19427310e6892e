package hook

// Garbage collection. Rules:
//   - GC never waits for one stuck sandbox: each sandbox is handled under
//     its own lock, taken with a bounded wait (backgroundLockWait); a busy
//     one is skipped until the next pass (GCResult.Busy).
//   - A cached attachment nri-cni has no record of is DELed under its
//     sandbox's lock, after checking again that no record claims it (an
//     attach records before it ADDs, under that lock).
//   - libcni's GC (CNI 1.1 GC with the attachments still valid), which must
//     not overlap any ADD or DEL, runs under the exclusive GC lock. That lock
//     is polled for, never queued for (a queued writer would stall every
//     attach behind it), and the plugin GC is skipped this pass if the lock
//     does not come within gcExclusiveWait.
//   - An unreadable record fails closed: it is rebuilt from libcni's cache
//     (nri-cni marks what it ADDs, NetworkAttachmentDefinitions included)
//     and judged like any record: kept (and rewritten) while its sandbox
//     lives, torn down when it is gone. Nothing of it is ever DELed while
//     the sandbox lives.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// gcExclusiveWait bounds the wait for the exclusive GC lock (libcni's GC).
const gcExclusiveWait = 2 * time.Second

// GCResult says what a GC pass did.
type GCResult struct {
	Kept        int // records whose sandbox is alive
	TornDown    int // stale records torn down and dropped
	Repaired    int // unreadable records of live sandboxes rebuilt from libcni's cache
	StaleCached int // cached attachments without a record, DELeted
	Busy        int // sandboxes skipped: another operation held them
	Errors      []error
}

// LiveFunc reports whether the sandbox of rec still exists. nil means: it
// exists while its recorded network namespace does (same path, same inode).
type LiveFunc func(rec *state.Record) bool

// GC tears down records whose sandbox is gone, DELs cached attachments of
// nri-cni's that no record claims (with an empty netns: a cached netns path
// may have been reused), and then runs libcni's GC (CNI 1.1) for every
// loaded network with the attachments still valid. See the rules above.
func (m *Manager) GC(ctx context.Context, live LiveFunc) GCResult {
	if live == nil {
		live = func(rec *state.Record) bool { return m.usableNetns(rec) != "" }
	}
	var res GCResult
	recs, errs := m.store.List()
	for _, err := range errs {
		var re *state.RecordError
		if errors.As(err, &re) {
			m.gcUnreadable(ctx, re.ID, live, &res)
			continue
		}
		m.log.WithError(err).Warn("gc: skipping a record file that names no sandbox")
	}
	for _, rec := range recs {
		if live(rec) {
			res.Kept++
			continue
		}
		m.gcRecord(ctx, rec.ID, live, &res)
	}
	n, errs := m.delStaleCached(ctx, &res)
	res.StaleCached += n
	res.Errors = append(res.Errors, errs...)
	m.pluginGC(ctx, &res)
	return res
}

// gcRecord tears down and drops the record of id if, under its lock, its
// sandbox is still found gone.
func (m *Manager) gcRecord(ctx context.Context, id string, live LiveFunc, res *GCResult) {
	unlock, err := m.lockFor(ctx, id, backgroundLockWait)
	if err != nil {
		res.Busy++
		return
	}
	defer func() { unlock(); m.gcMu.RUnlock() }()
	rec, err := m.store.Get(id)
	if err != nil || live(rec) {
		if err == nil {
			res.Kept++
		}
		return // gone meanwhile, changed, or unreadable now (next pass)
	}
	log := m.log.WithFields(logrus.Fields{"sandbox": rec.ID, "pod": rec.Name, "namespace": rec.Namespace})
	if rec.Phase != state.PhaseTornDown {
		if err := m.teardown(ctx, log, rec, ""); err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("gc: sandbox %s: %w", rec.ID, err))
			return // kept: retried next pass
		}
	}
	if err := m.store.Delete(rec.ID); err != nil {
		res.Errors = append(res.Errors, err)
		return
	}
	log.Info("gc: stale sandbox torn down")
	res.TornDown++
}

// gcUnreadable handles the unreadable record of id: rebuilt from libcni's
// cache, then kept and rewritten if its sandbox lives, else torn down and
// dropped.
func (m *Manager) gcUnreadable(ctx context.Context, id string, live LiveFunc, res *GCResult) {
	unlock, err := m.lockFor(ctx, id, backgroundLockWait)
	if err != nil {
		res.Busy++
		return
	}
	defer func() { unlock(); m.gcMu.RUnlock() }()
	if _, err := m.store.Get(id); errors.Is(err, state.ErrNotFound) || err == nil {
		return // dropped or rewritten meanwhile
	}
	rec, err := m.rebuild(id)
	log := m.log.WithField("sandbox", id)
	if err != nil {
		res.Errors = append(res.Errors, fmt.Errorf("gc: unreadable record of %s, and libcni's cache could not rebuild it: %w", id, err))
		return // kept as it is: never DEL what may be live
	}
	log = log.WithFields(logrus.Fields{"pod": rec.Name, "namespace": rec.Namespace, "networks": len(rec.Networks)})
	if live(rec) {
		if err := m.store.Delete(id); err == nil {
			err = m.store.Put(rec)
		}
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("gc: rewriting the record of %s: %w", id, err))
			return
		}
		log.Warn("gc: unreadable record of a live sandbox rebuilt from libcni's cache")
		res.Repaired++
		res.Kept++
		return
	}
	if err := m.teardown(ctx, log, rec, ""); err != nil {
		res.Errors = append(res.Errors, fmt.Errorf("gc: sandbox %s (unreadable record): %w", id, err))
		return
	}
	if err := m.store.Delete(id); err != nil {
		res.Errors = append(res.Errors, err)
		return
	}
	log.Info("gc: stale sandbox with an unreadable record torn down from libcni's cache")
	res.TornDown++
}

// delStaleCached DELs (empty netns) nri-cni's cached attachments of
// sandboxes no record (readable or not) names, each sandbox under its lock.
func (m *Manager) delStaleCached(ctx context.Context, res *GCResult) (int, []error) {
	atts, err := m.engine.CachedAttachments("")
	if err != nil {
		return 0, nil
	}
	type stale struct{ network, ifname string }
	ours := m.oursFilter()
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
	n := 0
	var errs []error
	for _, id := range order {
		unlock, err := m.lockFor(ctx, id, backgroundLockWait)
		if err != nil {
			res.Busy++
			continue
		}
		if _, err := m.store.Get(id); errors.Is(err, state.ErrNotFound) {
			for _, a := range byID[id] {
				if err := m.del(ctx, a.network, cni.Attachment{ContainerID: id, IfName: a.ifname}); err != nil {
					errs = append(errs, fmt.Errorf("gc: cached attachment %s/%s: %w", id, a.ifname, err))
					continue
				}
				m.log.WithFields(logrus.Fields{"sandbox": id, "network": a.network, "ifname": a.ifname}).
					Info("gc: stale cached attachment detached")
				n++
			}
		}
		unlock()
		m.gcMu.RUnlock()
	}
	return n, errs
}

// pluginGC runs libcni's GC for every loaded network, under the exclusive
// GC lock, with every attachment a record (or an unreadable record's
// cache) still claims as valid.
func (m *Manager) pluginGC(ctx context.Context, res *GCResult) {
	if !m.tryLockExclusive(ctx, gcExclusiveWait) {
		res.Busy++
		m.log.Info("gc: libcni's GC skipped this pass: ADDs or DELs kept running")
		return
	}
	defer m.gcMu.Unlock()
	valid := map[types.GCAttachment]bool{}
	recs, errs := m.store.List() // stable: records change only under the shared GC lock
	for _, rec := range recs {
		if rec.Phase == state.PhaseTornDown {
			continue
		}
		for _, n := range rec.Networks {
			valid[types.GCAttachment{ContainerID: rec.ID, IfName: n.IfName}] = true
		}
	}
	for _, err := range errs {
		var re *state.RecordError
		if !errors.As(err, &re) {
			continue
		}
		atts, _ := m.engine.CachedAttachments(re.ID)
		for _, att := range atts {
			valid[types.GCAttachment{ContainerID: att.ContainerID, IfName: att.IfName}] = true
		}
	}
	validList := make([]types.GCAttachment, 0, len(valid))
	for a := range valid {
		validList = append(validList, a)
	}
	for _, n := range m.engine.Networks() {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CNITimeout.D())
		err := m.engine.GC(cctx, n, validList)
		cancel()
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("gc: network %q: %w", n.Name, err))
		}
	}
}

// Err joins the pass's errors.
func (r GCResult) Err() error { return errors.Join(r.Errors...) }
