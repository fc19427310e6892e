package hook

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
)

// SyncResult says what a resync did.
type SyncResult struct {
	GCResult
	Attached   int
	Failed     int
	NotRunning int // listed but not running: not attached
}

// SyncOptions says what a resync may attach.
type SyncOptions struct {
	// AttachMissing (syncAttach): attach listed pods nri-cni has no record
	// of, if the runtime is really running them.
	AttachMissing bool
	// PidlessPods: the runtime reports Pid 0 for pods it runs (CRI-O with
	// the infra container dropped, as the kubelet runs it). Otherwise Pid 0
	// means "not running": containerd reports the pause pid of every running
	// sandbox, and lists a sandbox whose start failed as NOTREADY with Pid 0
	// (and its netns still pinned) after a restart.
	PidlessPods bool
	// ListedAt is when the runtime's list was received. A record created
	// after it belongs to a pod attached since (Synchronize answers at once,
	// and a RunPodSandbox may come before the resync runs): it is kept even
	// though the list does not name it. Zero: no such records are expected.
	ListedAt time.Time
}

// Sync reconciles nri-cni's records with the sandboxes the runtime lists
// (NRI Synchronize, sent on every (re)connect):
//   - a pod record whose sandbox is not listed, or whose netns is gone, is
//     torn down and dropped; then libcni GC runs with what is still valid
//     (Manager.GC: exclusive GC lock, never overlapping an ADD/DEL);
//   - with AttachMissing, listed pods the runtime is running (see running)
//     and nri-cni has no record of (created while nri-cni was away) are
//     attached, each under its sandbox lock.
//
// Container (hook mode) records are judged by their netns alone.
func (m *Manager) Sync(ctx context.Context, live []Sandbox, opts SyncOptions) SyncResult {
	byID := make(map[string]Sandbox, len(live))
	for _, sb := range live {
		byID[sb.ID] = sb
	}
	if m.hotplug() {
		m.live.replace(live)
	}
	res := SyncResult{GCResult: m.GC(ctx, func(rec *state.Record) bool {
		_, listed := byID[rec.ID]
		attachedSince := !opts.ListedAt.IsZero() && !rec.Created.Before(opts.ListedAt)
		if rec.Kind == "pod" && !listed && !attachedSince {
			return false
		}
		return m.usableNetns(rec) != ""
	})}
	if !opts.AttachMissing {
		m.reportLive(live)
		m.synced()
		return res
	}
	for _, sb := range live {
		if err := m.running(sb, opts.PidlessPods); err != nil {
			res.NotRunning++
			m.logFor(sb).WithError(err).Debug("resync: not attaching a sandbox the runtime is not running")
			continue
		}
		actx, cancel := context.WithTimeout(ctx, time.Duration(len(m.cfg.Networks)+1)*m.cfg.CNITimeout.D()*2)
		rec, err := m.AttachIfAbsent(actx, sb)
		cancel()
		switch {
		case errors.Is(err, ErrKnown):
		case err != nil:
			res.Failed++
			m.logFor(sb).WithError(err).Error("resync: attaching a pod created while nri-cni was away failed")
		case rec != nil:
			res.Attached++
		}
	}
	// Pods attached just now were reported by their attach; reporting them
	// again is harmless (the sink keeps the latest per pod).
	m.reportLive(live)
	m.synced()
	return res
}

// errNotRunning: a listed sandbox the runtime is not running.
var errNotRunning = errors.New("not running")

// running decides whether a listed sandbox is one the runtime is really
// running, the only kind a resync may attach (nil = it is):
//   - Pid > 0: the process is alive in the pinned network namespace;
//   - Pid 0: only where the runtime runs pods without a pid (PidlessPods),
//     and then its pinned namespace must exist.
//
// Host-network sandboxes pass; the attach that follows skips them by the
// same rule as RunPodSandbox.
func (m *Manager) running(sb Sandbox, pidless bool) error {
	var err error
	switch {
	case sb.Pinned == "":
		return errors.New("no network namespace (host network)")
	case sb.Pid > 0:
		_, err = m.ns.ResolveRunning(sb.Pid, sb.Pinned)
	case !pidless:
		return errors.Join(errNotRunning, errors.New("the runtime reports no process for it (pid 0)"))
	default:
		_, err = m.ns.Check(sb.Pinned)
	}
	// The host's namespace at the pinned path (the pid agreeing) is a
	// host-network sandbox, not a stopped one.
	if err != nil && !errors.Is(err, netns.ErrHostNetwork) && !(sb.Pid == 0 && errors.Is(err, netns.ErrHostNetns)) {
		return errors.Join(errNotRunning, err)
	}
	return nil
}

// logSync logs a resync's outcome.
func logSync(log *logrus.Entry, res SyncResult, d time.Duration) {
	l := log.WithFields(logrus.Fields{"kept": res.Kept, "tornDown": res.TornDown, "staleCached": res.StaleCached,
		"attached": res.Attached, "notRunning": res.NotRunning, "failed": res.Failed, "duration": d.Round(time.Microsecond)})
	if err := res.Err(); err != nil {
		l.WithError(err).Error("resync with the runtime finished with errors")
		return
	}
	l.Info("resync with the runtime done")
}
