package mnp

// The dirty queue: sandbox IDs whose rules may have to change. A change
// marks its sandboxes dirty; each is taken after the propagation delay
// (later marks within the delay coalesce with the first), by a few workers
// taking namespaces in turn, so one tenant's churn never holds up another
// namespace's pods. Each take calls PolicyApplier.ApplyPolicy, which
// re-renders under the sandbox lock and programs only a changed digest.
//
// A busy sandbox (attach.ErrBusy: another operation holds its lock) is
// taken again shortly, not counted as a try. A failure is retried after
// 1 s, 2 s, 4 s, 8 s and 16 s; then the sandbox is quarantined (its
// covered interfaces set down by the Quarantiner: stale rules may be more
// open than the policy) and retried every 16 s until it succeeds or goes.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/nri-cni/nri-cni/attach"
)

// PolicyApplier re-renders one sandbox's rules and programs them when
// their digest changed (the attach engine).
type PolicyApplier interface {
	ApplyPolicy(ctx context.Context, sandboxID string) error
}

// Quarantiner sets a sandbox's covered interfaces down after its rules
// could not be programmed (the attach engine); the next success brings
// them back.
type Quarantiner interface {
	Quarantine(ctx context.Context, sandboxID string) error
}

// SandboxLister lists every sandbox whose rules the applier keeps
// (attach.Manager.PolicySandboxes): once the caches synced each is taken,
// so records from before a restart are checked without waiting for their
// pods' SetLocal.
type SandboxLister interface {
	PolicySandboxes() []string
}

// Defaults of the queue.
const (
	DefaultPropagationDelay = 100 * time.Millisecond
	defaultWorkers          = 2
	defaultApplyTimeout     = 30 * time.Second
	busyDelay               = 50 * time.Millisecond
)

// retries are the waits after each failed try; past them, quarantine.
var retries = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// dirtyQueue holds keys "namespace/sandboxID".
type dirtyQueue struct {
	q           workqueue.TypedDelayingInterface[string]
	applier     PolicyApplier
	quarantiner Quarantiner
	observer    Observer
	log         *logrus.Entry
	delay       time.Duration
	timeout     time.Duration
	workers     int
	// isLocal says whether a sandbox is still this node's (a key of one
	// gone is dropped).
	isLocal func(id string) bool
	now     func() time.Time

	mu    sync.Mutex
	first map[string]time.Time // key → when it was first marked dirty, not yet taken
	fails map[string]int       // key → failed tries in a row
	// retries overrides the waits (tests).
	retries []time.Duration
}

func newDirtyQueue(applier PolicyApplier, quarantiner Quarantiner, observer Observer, log *logrus.Entry,
	delay, timeout time.Duration, workers int, isLocal func(string) bool, clk clock.WithTicker) *dirtyQueue {
	const name = "nri-cni-mnp"
	if clk == nil {
		clk = clock.RealClock{}
	}
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Queue: &byNamespace{}, Clock: clk})
	return &dirtyQueue{q: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name, Queue: fifo, Clock: clk}),
		applier: applier, quarantiner: quarantiner, observer: observer, log: log, delay: delay, timeout: timeout,
		workers: workers, isLocal: isLocal, now: clk.Now, first: map[string]time.Time{}, fails: map[string]int{}, retries: retries}
}

// byNamespace orders the ready keys: FIFO within a namespace, the
// namespaces in turn (the workqueue calls it under its lock).
type byNamespace struct{ rr attach.RoundRobin[string] }

func (q *byNamespace) Touch(string) {}
func (q *byNamespace) Len() int     { return q.rr.Len() }
func (q *byNamespace) Push(key string) {
	ns, _ := splitKey(key)
	q.rr.Push(ns, key)
}
func (q *byNamespace) Pop() string {
	key, _, _ := q.rr.Pop(nil)
	return key
}

// mark queues sandboxes (ID → namespace) after the propagation delay.
func (d *dirtyQueue) mark(ids map[string]string) {
	now := d.now()
	d.mu.Lock()
	for id, ns := range ids {
		key := ns + "/" + id
		if _, ok := d.first[key]; !ok {
			d.first[key] = now
		}
	}
	d.mu.Unlock()
	for id, ns := range ids {
		d.q.AddAfter(ns+"/"+id, d.delay)
	}
	d.depth()
}

// forget drops what is kept of a sandbox gone.
func (d *dirtyQueue) forget(ns, id string) {
	d.mu.Lock()
	delete(d.first, ns+"/"+id)
	delete(d.fails, ns+"/"+id)
	d.mu.Unlock()
}

func (d *dirtyQueue) depth() {
	if d.observer != nil {
		d.observer.SetMNPQueueDepth(d.q.Len())
	}
}

// run runs the workers until ctx ends.
func (d *dirtyQueue) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range d.workers {
		wg.Go(func() {
			for d.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	d.q.ShutDown()
	wg.Wait()
}

// next takes one key and applies it; false when the queue shut down.
func (d *dirtyQueue) next(ctx context.Context) bool {
	key, quit := d.q.Get()
	if quit {
		return false
	}
	defer d.q.Done(key)
	d.depth()
	ns, id := splitKey(key)
	d.mu.Lock()
	since, marked := d.first[key]
	delete(d.first, key)
	d.mu.Unlock()
	if ns != "" && !d.isLocal(id) { // "": listed by the applier, its to judge
		d.forget(ns, id)
		return true
	}
	actx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	err := d.applier.ApplyPolicy(actx, id)
	l := d.log.WithFields(logrus.Fields{"sandbox": id, "namespace": ns})
	switch {
	case err == nil:
		d.mu.Lock()
		delete(d.fails, key)
		d.mu.Unlock()
		if marked && d.observer != nil {
			d.observer.ObserveMNPPropagation(d.now().Sub(since))
		}
		return true
	case errors.Is(err, attach.ErrBusy):
		d.requeue(key, since, marked, busyDelay)
		return true
	}
	d.mu.Lock()
	d.fails[key]++
	n := d.fails[key]
	d.mu.Unlock()
	wait := d.retries[min(n, len(d.retries))-1]
	if n == len(d.retries)+1 {
		l.WithError(err).WithField("tries", n).Error("MultiNetworkPolicy rules could not be programmed; quarantining the covered interfaces")
		if d.quarantiner != nil {
			qctx, qcancel := context.WithTimeout(ctx, d.timeout)
			if qerr := d.quarantiner.Quarantine(qctx, id); qerr != nil {
				l.WithError(qerr).Error("MultiNetworkPolicy: the covered interfaces could not be quarantined either")
			}
			qcancel()
		}
	} else if n == 1 {
		l.WithError(err).Warn("MultiNetworkPolicy rules could not be programmed; retrying with backoff")
	}
	d.requeue(key, since, marked, wait)
	return true
}

// requeue takes key again after wait, keeping when it was first marked.
func (d *dirtyQueue) requeue(key string, since time.Time, marked bool, wait time.Duration) {
	if marked {
		d.mu.Lock()
		if _, newer := d.first[key]; !newer {
			d.first[key] = since
		}
		d.mu.Unlock()
	}
	d.q.AddAfter(key, wait)
}
