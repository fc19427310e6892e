package hook

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// GCResult says what a GC pass did.
type GCResult struct {
	Kept        int // records whose sandbox is alive
	TornDown    int // stale records torn down and dropped
	StaleCached int // cached attachments without a record, DELeted
	Errors      []error
}

// LiveFunc reports whether the sandbox of rec still exists. nil means: it
// exists while its recorded network namespace does (same path, same inode).
type LiveFunc func(rec *state.Record) bool

// GC tears down records whose sandbox is gone, DELs cached attachments of
// nri-cni's networks that no record claims (with an empty netns: a cached
// netns path may have been reused), and then runs libcni's GC (CNI 1.1) for
// every loaded network with the attachments still valid. It holds the GC lock
// exclusively, so it never overlaps an ADD or DEL of this process.
func (m *Manager) GC(ctx context.Context, live LiveFunc) GCResult {
	m.gcMu.Lock()
	defer m.gcMu.Unlock()
	if live == nil {
		live = func(rec *state.Record) bool { return m.usableNetns(rec) != "" }
	}
	var res GCResult
	recs, errs := m.store.List()
	for _, err := range errs {
		m.log.WithError(err).Warn("gc: skipping an unreadable record")
	}
	valid := map[types.GCAttachment]bool{}
	for _, rec := range recs {
		log := m.log.WithFields(logrus.Fields{"sandbox": rec.ID, "pod": rec.Name, "namespace": rec.Namespace})
		if live(rec) {
			res.Kept++
			for _, n := range rec.Networks {
				valid[types.GCAttachment{ContainerID: rec.ID, IfName: n.IfName}] = true
			}
			continue
		}
		if rec.Phase != state.PhaseTornDown {
			if err := m.teardown(ctx, log, rec, ""); err != nil {
				res.Errors = append(res.Errors, fmt.Errorf("gc: sandbox %s: %w", rec.ID, err))
				for _, n := range rec.Networks { // keep it valid: retried next pass
					valid[types.GCAttachment{ContainerID: rec.ID, IfName: n.IfName}] = true
				}
				continue
			}
		}
		if err := m.store.Delete(rec.ID); err != nil {
			res.Errors = append(res.Errors, err)
			continue
		}
		log.Info("gc: stale sandbox torn down")
		res.TornDown++
	}
	res.StaleCached, errs = m.delStaleCached(ctx, valid)
	res.Errors = append(res.Errors, errs...)

	validList := make([]types.GCAttachment, 0, len(valid))
	for a := range valid {
		validList = append(validList, a)
	}
	for _, n := range m.engine.Networks() {
		if err := m.engine.GC(ctx, n, validList); err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("gc: network %q: %w", n.Name, err))
		}
	}
	return res
}

// delStaleCached DELs (empty netns) our cached attachments not in valid.
func (m *Manager) delStaleCached(ctx context.Context, valid map[types.GCAttachment]bool) (int, []error) {
	atts, err := m.engine.CachedAttachments("")
	if err != nil {
		return 0, nil
	}
	ours := m.oursFilter()
	n := 0
	var errs []error
	for _, att := range atts {
		if !ours(att.Network, att.IfName) ||
			valid[types.GCAttachment{ContainerID: att.ContainerID, IfName: att.IfName}] {
			continue
		}
		if err := m.del(ctx, att.Network, cni.Attachment{ContainerID: att.ContainerID, IfName: att.IfName}); err != nil {
			errs = append(errs, fmt.Errorf("gc: cached attachment %s/%s: %w", att.ContainerID, att.IfName, err))
			continue
		}
		m.log.WithFields(logrus.Fields{"sandbox": att.ContainerID, "network": att.Network, "ifname": att.IfName}).
			Info("gc: stale cached attachment detached")
		n++
	}
	return n, errs
}

// Err joins the pass's errors.
func (r GCResult) Err() error { return errors.Join(r.Errors...) }
