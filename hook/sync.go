package hook

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/state"
)

// SyncResult says what a resync did.
type SyncResult struct {
	GCResult
	Attached int
	Failed   int
}

// Sync reconciles nri-cni's records with the sandboxes the runtime reports
// alive (NRI Synchronize, sent on every (re)connect):
//   - a pod record whose sandbox is not listed, or whose netns is gone, is
//     torn down and dropped; then libcni GC runs with what is still valid
//     (Manager.GC: exclusive GC lock, never overlapping an ADD/DEL);
//   - with attachMissing, listed pods with a live netns and no record (created
//     while nri-cni was away) are attached, each under its sandbox lock.
//
// Container (hook mode) records are judged by their netns alone.
func (m *Manager) Sync(ctx context.Context, live []Sandbox, attachMissing bool) SyncResult {
	byID := make(map[string]Sandbox, len(live))
	for _, sb := range live {
		byID[sb.ID] = sb
	}
	res := SyncResult{GCResult: m.GC(ctx, func(rec *state.Record) bool {
		if _, ok := byID[rec.ID]; !ok && rec.Kind == "pod" {
			return false
		}
		return m.usableNetns(rec) != ""
	})}
	if !attachMissing {
		return res
	}
	for _, sb := range live {
		if sb.Pinned == "" {
			continue // host network
		}
		if _, err := m.ns.Check(sb.Pinned); err != nil {
			continue // stopped: its netns is gone
		}
		actx, cancel := context.WithTimeout(ctx, time.Duration(len(m.cfg.Networks)+1)*m.cfg.CNITimeout.D()*2)
		_, err := m.AttachIfAbsent(actx, sb)
		cancel()
		switch {
		case errors.Is(err, ErrKnown):
		case err != nil:
			res.Failed++
			m.logFor(sb).WithError(err).Error("resync: attaching a pod created while nri-cni was away failed")
		default:
			res.Attached++
		}
	}
	return res
}

// logSync logs a resync's outcome.
func logSync(log *logrus.Entry, res SyncResult, d time.Duration) {
	l := log.WithFields(logrus.Fields{"kept": res.Kept, "tornDown": res.TornDown, "staleCached": res.StaleCached,
		"attached": res.Attached, "failed": res.Failed, "duration": d.Round(time.Microsecond)})
	if err := res.Err(); err != nil {
		l.WithError(err).Error("resync with the runtime finished with errors")
		return
	}
	l.Info("resync with the runtime done")
}
