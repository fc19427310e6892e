// Package reconcile holds the loops that run beside the runtime's events,
// on top of the attachment engine (attach): the resync with the runtime's
// list, garbage collection, the netns watcher and teardown retries,
// readiness (CNI STATUS), drift (CNI CHECK) and config reloads. Each works
// one sandbox at a time through the engine, which bounds every lock wait.
package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
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
	// Running are the runtime's running containers by sandbox id. A pod the
	// resync attaches (or fails to) with containers running started them
	// without its networks: reported, and restarted if failClosed says so.
	Running map[string][]Container
	// ListedAt is when the runtime's list was received. A record created
	// after it belongs to a pod attached since (Synchronize answers at once,
	// and a RunPodSandbox may come before the resync runs): it is kept even
	// though the list does not name it. Zero: no such records are expected.
	ListedAt time.Time
}

// Resyncer reconciles nri-cni's records with the runtime's list of
// sandboxes (NRI Synchronize, sent on every (re)connect).
type Resyncer struct {
	mgr   SyncEngine
	log   *logrus.Entry
	stops restarts // containers being stopped (started.go)

	mu    sync.Mutex // guards after
	after []func()
}

// NewResyncer returns a Resyncer of the engine mgr, logging to log.
func NewResyncer(mgr SyncEngine, log *logrus.Entry) *Resyncer { return &Resyncer{mgr: mgr, log: log} }

// AfterSync registers f to run after every resync: hot-plug's pod watcher
// hands every pod over again, now that the engine knows the runtime's
// sandboxes (a restarted nri-cni converges at once).
func (r *Resyncer) AfterSync(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.after = append(r.after, f)
}

// Sync reconciles:
//   - a pod record whose sandbox is not listed, or whose netns is gone, is
//     torn down and dropped; an unreadable one is rebuilt from libcni's
//     cache while its sandbox is listed and alive; then libcni GC runs with
//     what is still valid (GC);
//   - with AttachMissing, listed pods the runtime is running
//     (attach.Manager.Running) and nri-cni has no record of (created while
//     nri-cni was away) are attached, each under its sandbox lock.
//
// Container (hook mode) records are judged by their netns alone.
func (r *Resyncer) Sync(ctx context.Context, live []attach.Sandbox, opts SyncOptions) SyncResult {
	m := r.mgr
	byID := make(map[string]attach.Sandbox, len(live))
	for _, sb := range live {
		byID[sb.ID] = sb
	}
	m.SetLive(live)
	res := SyncResult{GCResult: GC(ctx, m, func(rec *state.Record) bool {
		_, listed := byID[rec.ID]
		attachedSince := !opts.ListedAt.IsZero() && !rec.Created.Before(opts.ListedAt)
		if rec.Kind == "pod" && !listed && !attachedSince {
			return false
		}
		return m.NetnsUsable(rec) != ""
	})}
	for _, err := range res.Strays {
		r.log.WithError(err).Warn("resync: skipping a record file that names no sandbox")
	}
	if opts.AttachMissing {
		r.attachMissing(ctx, live, opts, &res)
	}
	// Pods attached just now were reported by their attach; reporting them
	// again is harmless (the sink keeps the latest per pod).
	m.ReportLive(live)
	r.mu.Lock()
	after := append([]func(){}, r.after...)
	r.mu.Unlock()
	for _, f := range after {
		f()
	}
	return res
}

// resyncAttachers is how many pods the resync attaches at once: the pods
// created while nri-cni was away (a rolling upgrade during a storm: dozens)
// wait for it, and different pods' attaches run in parallel under their own
// locks, as background attaches do.
const resyncAttachers = 4

func (r *Resyncer) attachMissing(ctx context.Context, live []attach.Sandbox, opts SyncOptions, res *SyncResult) {
	m := r.mgr
	cfg := m.Config()
	var mu sync.Mutex // guards res
	var wg sync.WaitGroup
	slots := make(chan struct{}, resyncAttachers)
	for _, sb := range live {
		log := r.log.WithFields(logrus.Fields{"sandbox": sb.ID, "pod": sb.Pod.Name, "namespace": sb.Pod.Namespace})
		if err := m.Running(sb, opts.PidlessPods); err != nil {
			mu.Lock()
			res.NotRunning++
			mu.Unlock()
			log.WithError(err).Debug("resync: not attaching a sandbox the runtime is not running")
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			actx, cancel := context.WithTimeout(ctx, time.Duration(len(cfg.Networks)+1)*cfg.CNITimeout.D()*2)
			rec, err := m.AttachIfAbsent(actx, sb)
			cancel()
			attachedNow, failed := err == nil && rec != nil, err != nil && !errors.Is(err, attach.ErrKnown)
			if ctrs := opts.Running[sb.ID]; len(ctrs) > 0 && (attachedNow || failed) {
				r.startedWithout(ctx, sb, ctrs, attachedNow)
				if failed {
					r.retryStarted(ctx, sb, ctrs, opts.PidlessPods)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, attach.ErrKnown):
			case err != nil:
				res.Failed++
				log.WithError(err).Error("resync: attaching a pod created while nri-cni was away failed")
			case rec != nil:
				res.Attached++
			}
		}()
	}
	wg.Wait()
}

// LogSync logs a resync's outcome.
func LogSync(log *logrus.Entry, res SyncResult, d time.Duration) {
	l := log.WithFields(logrus.Fields{"kept": res.Kept, "tornDown": res.TornDown, "repaired": res.Repaired,
		"staleCached": res.StaleCached, "busy": res.Busy, "attached": res.Attached, "notRunning": res.NotRunning,
		"failed": res.Failed, "duration": d.Round(time.Microsecond)})
	if err := res.Err(); err != nil {
		l.WithError(err).Error("resync with the runtime finished with errors")
		return
	}
	l.Info("resync with the runtime done")
}
