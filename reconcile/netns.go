package reconcile

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// DefaultSweep is how often the netns watcher double-checks every record
// (missed events, directories that appeared later).
const DefaultSweep = 30 * time.Second

// netnsWatcher releases a sandbox as soon as its pinned network namespace
// disappears. containerd removes the pinned path at teardown, and after a
// containerd restart that is the only sign nri-cni gets for the pods that
// existed before it (containerd sends them no NRI Stop/Remove).
type netnsWatcher struct {
	m   Releaser
	w   *fsnotify.Watcher
	log *logrus.Entry

	mu   sync.Mutex
	dirs map[string]bool
}

// WatchNetns starts the watcher (and the teardown retries), logging to
// log; it runs until ctx ends. Call it before events are served.
func WatchNetns(ctx context.Context, m Releaser, log *logrus.Entry, sweep time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("netns watcher: %w", err)
	}
	nw := &netnsWatcher{m: m, w: w, log: log.WithField("component", "netns-watcher"), dirs: map[string]bool{}}
	m.OnNetns(func(path string) { nw.watch(filepath.Dir(path)) })
	recs, _ := m.Records()
	for _, r := range recs {
		nw.watch(filepath.Dir(r.Netns))
	}
	go nw.run(ctx, sweep)
	return nil
}

func (nw *netnsWatcher) watch(dir string) {
	if dir == "." || dir == "/" || strings.HasPrefix(dir, "/proc/") {
		return // /proc/<pid>/ns paths cannot be watched: the sweep covers them
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.dirs[dir] {
		return
	}
	if err := nw.w.Add(dir); err != nil {
		return // not there yet: the next sweep tries again
	}
	nw.dirs[dir] = true
}

func (nw *netnsWatcher) run(ctx context.Context, sweep time.Duration) {
	defer nw.w.Close()
	t := time.NewTicker(sweep)
	defer t.Stop()
	retry := time.NewTicker(attach.RetryBase)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-retry.C:
			nw.m.RetryTeardowns(ctx, now)
		case ev, ok := <-nw.w.Events:
			if !ok {
				return
			}
			if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				nw.release(ctx, func(r *state.Record) bool { return r.Netns == ev.Name })
			}
		case err, ok := <-nw.w.Errors:
			if !ok {
				return
			}
			nw.log.WithError(err).Warn("netns watch error; the sweep still runs")
		case <-t.C:
			nw.release(ctx, func(*state.Record) bool { return true })
		}
	}
}

// release detaches (and forgets) every selected record whose netns is gone.
func (nw *netnsWatcher) release(ctx context.Context, sel func(*state.Record) bool) {
	recs, _ := nw.m.Records()
	for _, r := range recs {
		nw.watch(filepath.Dir(r.Netns))
		if !sel(r) || nw.m.NetnsUsable(r) != "" {
			continue
		}
		sb := attach.Sandbox{ID: r.ID, Kind: r.Kind, Pod: cni.PodIdentity{Namespace: r.Namespace, Name: r.Name, UID: r.UID, InfraID: r.ID}}
		log := nw.log.WithFields(logrus.Fields{"sandbox": r.ID, "pod": r.Name, "namespace": r.Namespace, "netns": r.Netns})
		tore, err := nw.m.DetachWithin(ctx, sb, true, attach.BackgroundLockWait)
		if err != nil {
			log.WithError(err).Error("netns gone, releasing failed; retried with backoff")
			continue
		}
		if !tore {
			// Stop released it already (CRI-O removes the netns before
			// Stop; Stop may take the pod's lock first): only the record
			// was left.
			log.Debug("netns gone: record of a torn-down sandbox dropped")
			continue
		}
		log.Info("netns gone: networks released")
	}
}
