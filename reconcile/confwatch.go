package reconcile

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
)

// reloadDelay lets a burst of writes (an editor, a half-written file being
// completed) settle before the config dir is read again.
const reloadDelay = 250 * time.Millisecond

// WatchConfigs reloads the engine's networks whenever dir changes, until ctx
// ends. Calls in flight keep the set they started with; DEL uses the config
// cached at ADD time, so changing or removing a network never strands an
// attachment. Invalid files are skipped with a warning naming each.
// onReload, if set, runs after each successful reload.
func WatchConfigs(ctx context.Context, engine *cni.Engine, dir string, log *logrus.Entry, onReload func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return err
	}
	log = log.WithField("confDir", dir)
	go func() {
		defer w.Close()
		var timer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				timer = time.After(reloadDelay)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.WithError(err).Warn("config watch error")
			case <-timer:
				timer = nil
				skipped, err := engine.Reload(ctx)
				if err != nil {
					log.WithError(err).Error("reloading CNI configs failed; keeping the previous set")
					continue
				}
				for _, e := range skipped {
					log.WithError(e).Warn("skipping invalid CNI config")
				}
				names := []string{}
				for _, n := range engine.Networks() {
					names = append(names, n.Name)
				}
				log.WithField("loaded", names).Info("CNI configs reloaded")
				if onReload != nil {
					onReload()
				}
			}
		}
	}()
	return nil
}
