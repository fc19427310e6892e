package kube

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/plan"
)

// networkAnnotations are the annotations a pod's networks come from.
var networkAnnotations = []string{plan.AnnotationNPWGNetworks, plan.AnnotationNetworks}

// PodWatcher is hot-plug's eye on the API: an informer over the pods bound
// to this node (field selector spec.nodeName), reduced to their metadata,
// and a work queue that hands each pod whose networks annotation changed to
// the Replugger — off the informer's goroutine, one pod at a time per key,
// retried with backoff when the Manager is busy. The initial list and every
// resync hand over each pod too (Changed false), so a restarted nri-cni
// converges pods it has records of.
type PodWatcher struct {
	informer cache.SharedIndexInformer
	lister   listerscorev1.PodLister
	target   attach.Replugger
	log      *logrus.Entry
	queue    workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex      // guards changed
	changed map[string]bool // keys whose annotation changed since queued
}

// PodWatchOptions tunes a PodWatcher; zero values take the defaults.
type PodWatchOptions struct {
	// Resync hands every pod over again this often (default 1 min).
	Resync time.Duration
	// Timeout bounds one Replug (default 30 s).
	Timeout time.Duration
}

// NewPodWatcher watches the pods of node.
func NewPodWatcher(client kubernetes.Interface, node string, target attach.Replugger, log *logrus.Entry, o PodWatchOptions) *PodWatcher {
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, o.Resync,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	// Keep only what hot-plug reads: a node's pods, not their specs.
	_ = inf.SetTransform(func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Annotations: p.Annotations, DeletionTimestamp: p.DeletionTimestamp}}, nil
	})
	w := &PodWatcher{informer: inf, lister: listerscorev1.NewPodLister(inf.GetIndexer()), target: target, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-cni-hotplug"}),
		changed: map[string]bool{}}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.enqueue(obj, false) },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Pod)
			c, ok2 := cur.(*corev1.Pod)
			if !ok1 || !ok2 {
				return
			}
			switch {
			case networksDiffer(o, c):
				w.enqueue(cur, true)
			case o.ResourceVersion == c.ResourceVersion: // a resync
				w.enqueue(cur, false)
			}
		},
	})
	return w
}

func networksDiffer(a, b *corev1.Pod) bool {
	for _, k := range networkAnnotations {
		av, aok := a.Annotations[k]
		bv, bok := b.Annotations[k]
		if av != bv || aok != bok {
			return true
		}
	}
	return false
}

func (w *PodWatcher) enqueue(obj any, changed bool) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	if changed {
		w.mu.Lock()
		w.changed[key] = true
		w.mu.Unlock()
	}
	w.queue.Add(key)
}

// Run runs the informer and one worker until ctx ends. timeout bounds each
// Replug (0 = 30 s).
func (w *PodWatcher) Run(ctx context.Context, timeout time.Duration) {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	go w.informer.RunWithContext(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for w.next(ctx, timeout) {
		}
	}()
	<-ctx.Done()
	w.queue.ShutDown()
	<-done
}

// ResyncAll hands every pod of the node over again (not as a change): the
// Manager calls it after a resync, when it knows the runtime's sandboxes.
func (w *PodWatcher) ResyncAll() {
	for _, key := range w.informer.GetStore().ListKeys() {
		w.queue.Add(key)
	}
}

// HasSynced reports whether the first list has completed.
func (w *PodWatcher) HasSynced() bool { return w.informer.HasSynced() }

func (w *PodWatcher) next(ctx context.Context, timeout time.Duration) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	w.mu.Lock()
	changed := w.changed[key]
	delete(w.changed, key)
	w.mu.Unlock()
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := w.lister.Pods(ns).Get(name)
	if err != nil || pod.DeletionTimestamp != nil {
		w.queue.Forget(key) // gone or going: Stop tears it down
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = w.target.Replug(rctx, attach.PodUpdate{UID: string(pod.UID), Namespace: ns, Name: name,
		Annotations: pod.Annotations, Changed: changed})
	switch {
	case err == nil, errors.Is(err, attach.ErrHotplugRefused):
		// Done, or refused (the Manager raised a Warning Event): retrying
		// the same value is pointless; the next change is handed over anew.
		w.queue.Forget(key)
	default:
		l := w.log.WithError(err).WithFields(logrus.Fields{"pod": name, "namespace": ns})
		if errors.Is(err, plan.ErrSourceNotSynced) {
			l.Debug("hot-plug waits for the NetworkAttachmentDefinition cache")
		} else {
			l.Warn("hot-plug failed; retrying with backoff")
		}
		if changed {
			w.mu.Lock()
			w.changed[key] = true
			w.mu.Unlock()
		}
		w.queue.AddRateLimited(key)
	}
	return true
}
