package kube

// Where hot-plug's pods come from: its own informer (this node's pods, a
// field selector), or a watch another part holds (SharedPods).

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/loop"
)

type podSource interface {
	// run runs the source until ctx ends; resync hands every pod over
	// again (for a source without an informer's resync).
	run(ctx context.Context, resync func())
	keys() []string
	get(namespace, name string) (*corev1.Pod, bool)
	hasSynced() bool
}

type informerPods struct {
	inf    cache.SharedIndexInformer
	lister listerscorev1.PodLister
}

func (s *informerPods) run(ctx context.Context, _ func()) { s.inf.RunWithContext(ctx) }
func (s *informerPods) keys() []string                    { return s.inf.GetStore().ListKeys() }
func (s *informerPods) hasSynced() bool                   { return s.inf.HasSynced() }
func (s *informerPods) get(namespace, name string) (*corev1.Pod, bool) {
	p, err := s.lister.Pods(namespace).Get(name)
	return p, err == nil
}

type sharedPods struct {
	pods   SharedPods
	resync time.Duration
}

func (s *sharedPods) run(ctx context.Context, resync func()) {
	loop.Every(ctx, s.resync, nil, false, resync)
}

func (s *sharedPods) keys() []string  { return s.pods.Keys() }
func (s *sharedPods) hasSynced() bool { return s.pods.HasSynced() }
func (s *sharedPods) get(namespace, name string) (*corev1.Pod, bool) {
	return s.pods.Get(namespace, name)
}
