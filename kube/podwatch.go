package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// to this node (field selector spec.nodeName), reduced to their metadata —
// or, with MultiNetworkPolicy on, the same pods from its cluster-wide pod
// watch (NewSharedPodWatcher), so the node keeps one pod watch —
// and a work queue that hands each pod whose networks annotation changed to
// the Replugger — off the informer's goroutine, one pod at a time per key,
// from a few workers that take the pods namespace by namespace in turn
// (FIFO within one), so one namespace's many pods never hold up another's.
// The initial list and every resync hand over each pod too (Changed false),
// so a restarted nri-cni converges pods it has records of.
//
// A failing hot-plug is retried with backoff a few times for the same
// annotation value (Attempts), then given up: one Warning Event for its
// first failure, one saying it gave up, and it is tried again when the
// annotation changes or, once, every RetryAfter. A refused value (bad
// annotation, unknown NAD) is not retried before either. A pod busy with
// another operation, or a NAD cache still filling, is retried with backoff
// and not counted.
type PodWatcher struct {
	src    podSource
	target attach.Replugger
	log    *logrus.Entry
	queue  workqueue.TypedRateLimitingInterface[string]
	o      PodWatchOptions

	mu      sync.Mutex        // guards changed and tries
	changed map[string]bool   // keys whose annotation changed since queued
	tries   map[string]*tries // keys whose hot-plug failed
}

// tries is what the watcher keeps of a pod whose hot-plug failed: the
// annotation value it failed at and how often; when it gave up on it (or
// the value was refused).
type tries struct {
	uid, value string
	changed    bool      // the value came as a change: every try says so
	failed     int       // failed tries at value (busy, cache filling: not counted)
	settled    time.Time // gave up or refused at; zero while retrying
}

// PodWatchOptions tunes a PodWatcher; zero values take the defaults.
type PodWatchOptions struct {
	// Resync hands every pod over again this often (default 1 min).
	Resync time.Duration
	// Timeout bounds one Replug (default 30 s; Run's timeout wins).
	Timeout time.Duration
	// Workers replug pods at once (default 2).
	Workers int
	// Attempts are the tries at one annotation value before hot-plug
	// gives up on it (default 5).
	Attempts int
	// RetryAfter: a value given up on or refused is tried again after this
	// (default 10 min), or at once when the annotation changes.
	RetryAfter time.Duration
	// BaseDelay and MaxDelay bound the backoff between tries (default 1 s,
	// 30 s).
	BaseDelay, MaxDelay time.Duration
}

func (o *PodWatchOptions) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Resync, time.Minute)
	def(&o.Timeout, 30*time.Second)
	def(&o.RetryAfter, 10*time.Minute)
	def(&o.BaseDelay, time.Second)
	def(&o.MaxDelay, 30*time.Second)
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
}

// NewPodWatcher watches the pods of node.
func NewPodWatcher(client kubernetes.Interface, node string, target attach.Replugger, log *logrus.Entry, o PodWatchOptions) *PodWatcher {
	o.defaults()
	factory := informers.NewSharedInformerFactoryWithOptions(client, o.Resync,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	lister := listerscorev1.NewPodLister(inf.GetIndexer())
	// Keep only what hot-plug reads: a node's pods, not their specs.
	_ = inf.SetTransform(func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Annotations: p.Annotations, DeletionTimestamp: p.DeletionTimestamp}}, nil
	})
	w := newPodWatcher(&informerPods{inf: inf, lister: lister}, target, log, o)
	_, _ = inf.AddEventHandler(w.handler())
	return w
}

// SharedPods is a feed of this node's pods from a watch another part
// holds: MultiNetworkPolicy's pod reflector (mnp.LocalPods), so that the
// node keeps one pod watch.
type SharedPods interface {
	AddEventHandler(h cache.ResourceEventHandler)
	Get(namespace, name string) (*corev1.Pod, bool)
	Keys() []string
	HasSynced() bool
}

// NewSharedPodWatcher is NewPodWatcher over pods another watch feeds; the
// Resync is its own (every pod handed over again).
func NewSharedPodWatcher(pods SharedPods, target attach.Replugger, log *logrus.Entry, o PodWatchOptions) *PodWatcher {
	o.defaults()
	w := newPodWatcher(&sharedPods{pods: pods, resync: o.Resync}, target, log, o)
	pods.AddEventHandler(w.handler())
	return w
}

func newPodWatcher(src podSource, target attach.Replugger, log *logrus.Entry, o PodWatchOptions) *PodWatcher {
	const name = "nri-cni-hotplug"
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Queue: &byNamespace{}})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name, Queue: fifo})
	return &PodWatcher{src: src, target: target, log: log, o: o,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.BaseDelay, o.MaxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name, DelayingQueue: delaying}),
		changed: map[string]bool{}, tries: map[string]*tries{}}
}

// handler is what the watcher does with each pod event.
func (w *PodWatcher) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
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
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				w.forget(key)
			}
		},
	}
}

// byNamespace is the hot-plug queue's order: a namespace's pods in FIFO
// order, the namespaces in turn (the workqueue calls it under its lock).
type byNamespace struct{ rr attach.RoundRobin[string] }

func (q *byNamespace) Touch(string) {}

func (q *byNamespace) Push(key string) {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	q.rr.Push(ns, key)
}

func (q *byNamespace) Len() int { return q.rr.Len() }

func (q *byNamespace) Pop() string {
	key, _, _ := q.rr.Pop(nil)
	return key
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

// networksValue is the pod's networks annotations as one value.
func networksValue(p *corev1.Pod) string {
	var b strings.Builder
	for _, k := range networkAnnotations {
		if v, ok := p.Annotations[k]; ok {
			fmt.Fprintf(&b, "%d:%s;", len(v), v)
		} else {
			b.WriteString("-;")
		}
	}
	return b.String()
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

// forget drops what the watcher keeps of key (the pod is gone).
func (w *PodWatcher) forget(key string) {
	w.mu.Lock()
	delete(w.changed, key)
	delete(w.tries, key)
	w.mu.Unlock()
}

// Run runs the informer and the workers until ctx ends. timeout bounds
// each Replug (0 = the options' Timeout).
func (w *PodWatcher) Run(ctx context.Context, timeout time.Duration) {
	if timeout <= 0 {
		timeout = w.o.Timeout
	}
	go w.src.run(ctx, w.ResyncAll)
	var wg sync.WaitGroup
	for range w.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.next(ctx, timeout) {
			}
		}()
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
}

// ResyncAll hands every pod of the node over again (not as a change): the
// Manager calls it after a resync, when it knows the runtime's sandboxes.
func (w *PodWatcher) ResyncAll() {
	for _, key := range w.src.keys() {
		w.queue.Add(key)
	}
}

// HasSynced reports whether the first list has completed.
func (w *PodWatcher) HasSynced() bool { return w.src.hasSynced() }

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
	pod, ok := w.src.get(ns, name)
	if !ok || pod.DeletionTimestamp != nil {
		w.queue.Forget(key) // gone or going: Stop tears it down
		w.forget(key)
		return true
	}
	t, ok := w.admit(key, string(pod.UID), networksValue(pod), changed, time.Now())
	if !ok {
		return true // given up on this value: until it changes, or RetryAfter
	}
	u := attach.PodUpdate{UID: string(pod.UID), Namespace: ns, Name: name, Annotations: pod.Annotations, Changed: t.changed}
	switch try := t.failed + 1; {
	case try >= w.o.Attempts:
		u.GiveUp = w.giveUpNote()
	case try > 1:
		u.Quiet = true // its first failure raised the Event
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := w.target.Replug(rctx, u)
	w.done(key, t, err)
	return true
}

// giveUpNote ends the Warning Event of the last try at a value.
func (w *PodWatcher) giveUpNote() string {
	return fmt.Sprintf("hot-plug gave up on this annotation value after %d tries; it tries again when the annotation changes, or in %s",
		w.o.Attempts, w.o.RetryAfter)
}

// admit decides whether key's pod, whose annotation value is value, is
// replugged now, and returns what is known of its earlier tries: a new
// value, a change or another pod starts afresh; a value given up on or
// refused waits for RetryAfter.
func (w *PodWatcher) admit(key, uid, value string, changed bool, now time.Time) (tries, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tries[key]
	if t == nil || t.uid != uid || t.value != value || changed {
		delete(w.tries, key)
		return tries{uid: uid, value: value, changed: changed}, true
	}
	if !t.settled.IsZero() && now.Sub(t.settled) < w.o.RetryAfter {
		return *t, false
	}
	return *t, true
}

// done records how key's try t ended and queues the next one, if any.
func (w *PodWatcher) done(key string, t tries, err error) {
	l := w.log.WithFields(logrus.Fields{"pod": key, "annotation": t.value})
	settle := func() {
		w.queue.Forget(key)
		w.queue.AddAfter(key, w.o.RetryAfter)
	}
	switch {
	case err == nil:
		w.mu.Lock()
		delete(w.tries, key)
		w.mu.Unlock()
		w.queue.Forget(key)
		return
	case errors.Is(err, attach.ErrHotplugRefused):
		// Refused (the Manager raised a Warning Event): the same value
		// is tried again only after RetryAfter, or once changed.
		t.settled = time.Now()
		l.WithError(err).Debug("hot-plug refused")
		defer settle()
	case errors.Is(err, plan.ErrSourceNotSynced), errors.Is(err, attach.ErrBusy):
		// No verdict on the pod: retried with backoff, not counted.
		l.WithError(err).Debug("hot-plug waits (the NetworkAttachmentDefinition cache, or another operation on the pod)")
		defer w.queue.AddRateLimited(key)
	default:
		t.failed++
		if t.failed >= w.o.Attempts {
			t.settled = time.Now()
			l.WithError(err).WithField("tries", t.failed).Warn(w.giveUpNote())
			defer settle()
			break
		}
		if t.failed == 1 {
			l.WithError(err).Warn("hot-plug failed; retrying with backoff")
		} else {
			l.WithError(err).WithField("tries", t.failed).Debug("hot-plug failed again; retrying with backoff")
		}
		defer w.queue.AddRateLimited(key)
	}
	w.mu.Lock()
	w.tries[key] = &t
	w.mu.Unlock()
}
