package kube

// Keeping the NAD cache within its budget (nadbudget.go): the informer's
// events enter the budget's books, one settler applies the fair share, and
// one worker reads back from the API server the NADs it admits again.

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/config"
)

// NADCacheObserver is the metrics side of the NAD cache (metrics.Metrics):
// how many NADs the budget has dropped now.
type NADCacheObserver interface {
	SetNADCacheDropped(n int)
}

// Bounds of reading dropped NADs back: one worker, at most refetchQPS
// GETs a second after a burst of refetchBurst, a failed one retried with
// backoff.
const (
	refetchQPS      = 5
	refetchBurst    = 20
	refetchBaseWait = 100 * time.Millisecond
	refetchMaxWait  = 5 * time.Minute
)

// account enters an informer event in the budget's books (the settler
// acts on it).
func (s *NADSource) account(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*cachedNAD)
	if !ok {
		return
	}
	if deleted {
		s.budget.remove(c.cell.key())
	} else {
		s.budget.put(c.cell)
	}
}

// settleEvery spaces the budget's settling: a burst of events (the first
// list of a cluster over the budget) is settled a few times, not once per
// NAD, each settling a sort of every NAD.
const settleEvery = 100 * time.Millisecond

// settleLoop settles the budget when its books changed (budget.due), at
// most every settleEvery, until ctx ends.
func (s *NADSource) settleLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.budget.kick:
		}
		s.applied(s.budget.settle())
		select {
		case <-ctx.Done():
			return
		case <-time.After(settleEvery):
		}
	}
}

// applied logs and reports what the budget did, queues what it admitted
// again and, when it changed other NADs' verdicts, tells OnChange's
// callers.
func (s *NADSource) applied(ch budgetChange) {
	for _, c := range ch.dropped {
		s.log.WithFields(logrus.Fields{"nad": c.key(), "bytes": c.size, "key": config.MaxNADCacheBytesKey}).
			Warn("NetworkAttachmentDefinition dropped from this node's NAD cache: pods naming it fail until it fits again: " + c.over.why(c.namespace))
	}
	for _, key := range ch.refetch {
		s.queue.AddRateLimited(key)
	}
	if o := s.observer.Load(); o != nil {
		(*o).SetNADCacheDropped(ch.out)
	}
	if len(ch.dropped) > 0 {
		s.changed()
	}
}

// SetObserver reports the dropped NADs to o from now on (the metrics exist
// only once the engine does).
func (s *NADSource) SetObserver(o NADCacheObserver) {
	s.observer.Store(&o)
	o.SetNADCacheDropped(s.budget.dropped())
}

// Run runs the informer, the budget's settler and the worker reading
// dropped NADs back, until ctx ends.
func (s *NADSource) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	go s.refetchLoop(ctx)
	go s.settleLoop(ctx)
	s.informer.RunWithContext(ctx)
}

// refetchLoop reads back, one at a time, the NADs the budget admits again.
func (s *NADSource) refetchLoop(ctx context.Context) {
	for {
		key, quit := s.queue.Get()
		if quit {
			return
		}
		err := s.refetch(ctx, key)
		switch {
		case err == nil || ctx.Err() != nil:
			s.queue.Forget(key)
		default:
			l := s.log.WithError(err).WithField("nad", key)
			if s.queue.NumRequeues(key) == 0 {
				l.Warn("NetworkAttachmentDefinition admitted again to the NAD cache but not read back yet; retrying with backoff")
			} else {
				l.Debug("NetworkAttachmentDefinition not read back yet; retrying with backoff")
			}
			s.queue.AddRateLimited(key)
		}
		s.queue.Done(key)
	}
}

// refetch reads key's NAD from the API server's watch cache and gives its
// content to the budget, if the version it waits for is still the one
// served. Another version (the watch cache behind or ahead of the
// informer), or none, is retried: the informer's own event for a newer
// version or a delete ends the wait.
func (s *NADSource) refetch(ctx context.Context, key string) error {
	version, ok := s.budget.refetching(key)
	if !ok {
		return nil
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	obj, err := s.client.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("reading NetworkAttachmentDefinition %s back: %w", key, err)
	}
	if obj.ResourceVersion != version {
		return fmt.Errorf("reading NetworkAttachmentDefinition %s back: the API server served version %s, the cache waits for %s",
			key, obj.ResourceVersion, version)
	}
	if s.budget.fill(key, version, contentOf(obj, s.maxBytes)) {
		s.log.WithField("nad", key).Info("NetworkAttachmentDefinition back in this node's NAD cache")
		if o := s.observer.Load(); o != nil {
			(*o).SetNADCacheDropped(s.budget.dropped())
		}
		s.changed()
	}
	return nil
}
