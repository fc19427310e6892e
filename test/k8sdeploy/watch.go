package k8sdeploy

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// marks are times of first sightings by key, with waiters.
type marks struct {
	mu      sync.Mutex
	at      map[string]time.Time
	changed chan struct{} // closed and replaced on every change
	err     error         // why the watch ended early
}

func newMarks() *marks { return &marks{at: map[string]time.Time{}, changed: make(chan struct{})} }

// set records key at t unless it is recorded already.
func (m *marks) set(key string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.at[key]; seen {
		return
	}
	m.at[key] = t
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *marks) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = err
		close(m.changed)
		m.changed = make(chan struct{})
	}
}

func (m *marks) wait(ctx context.Context, key string, timeout time.Duration) (time.Time, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		m.mu.Lock()
		at, ok := m.at[key]
		err, changed := m.err, m.changed
		m.mu.Unlock()
		switch {
		case ok:
			return at, nil
		case err != nil:
			return time.Time{}, err
		}
		select {
		case <-changed:
		case <-timer.C:
			return time.Time{}, fmt.Errorf("%s: not within %s", key, timeout)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: %w", key, ctx.Err())
		}
	}
}

// watcher follows a watch from a resource version, resuming from the last
// one seen when the server closes it, and hands every Added or Modified
// object to observe with the local time of its arrival.
type watcher struct {
	*marks
	cancel context.CancelFunc
	done   chan struct{}
}

type watchFunc func(ctx context.Context, rv string) (watch.Interface, error)

func startWatcher(ctx context.Context, rv string, w watchFunc, observe func(m *marks, obj any, at time.Time)) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	wr := &watcher{marks: newMarks(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(wr.done)
		for ctx.Err() == nil {
			wi, err := w(ctx, rv)
			if err != nil {
				wr.fail(err)
				return
			}
			for ev := range wi.ResultChan() {
				now := time.Now()
				if ev.Type == watch.Error {
					wi.Stop()
					wr.fail(fmt.Errorf("watch: %v", ev.Object))
					return
				}
				if o, ok := ev.Object.(metav1.Object); ok {
					rv = o.GetResourceVersion()
				}
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					observe(wr.marks, ev.Object, now)
				}
			}
			wi.Stop()
		}
	}()
	return wr
}

// Stop ends the watch.
func (w *watcher) Stop() {
	w.cancel()
	<-w.done
}

// ReadyWatch records when each pod matching a selector was first seen
// Ready, at the local time its watch event arrived. The API's condition
// timestamps have a resolution of one second; a watch event's arrival is
// what a client can time to the millisecond.
type ReadyWatch struct{ *watcher }

// WatchReady starts watching the pods in namespace ns that match the label
// selector. Stop ends it.
func WatchReady(ctx context.Context, k kubernetes.Interface, ns, selector string) (*ReadyWatch, error) {
	return WatchPods(ctx, k, ns, selector, PodReady)
}

// WatchPods is WatchReady for another condition: Wait returns when a pod was
// first seen with cond true.
func WatchPods(ctx context.Context, k kubernetes.Interface, ns, selector string, cond func(*corev1.Pod) bool) (*ReadyWatch, error) {
	list, err := k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing pods %s in %s: %w", selector, ns, err)
	}
	observe := func(m *marks, obj any, at time.Time) {
		if p, ok := obj.(*corev1.Pod); ok && cond(p) {
			m.set(p.Name, at)
		}
	}
	w := startWatcher(ctx, list.ResourceVersion, func(ctx context.Context, rv string) (watch.Interface, error) {
		wi, err := k.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
		if err != nil {
			return nil, fmt.Errorf("watching pods %s in %s: %w", selector, ns, err)
		}
		return wi, nil
	}, observe)
	for i := range list.Items {
		observe(w.marks, &list.Items[i], time.Now())
	}
	return &ReadyWatch{w}, nil
}

// Wait returns when the pod was first seen Ready, waiting up to timeout.
func (w *ReadyWatch) Wait(ctx context.Context, name string, timeout time.Duration) (time.Time, error) {
	at, err := w.wait(ctx, name, timeout)
	if err != nil {
		return at, fmt.Errorf("pod %s: %w", name, err)
	}
	return at, nil
}

// EventWatch records when each pod's events first arrived, by reason (the
// kubelet's Pulled, Created, Started; the scheduler's Scheduled), at the
// local time of arrival. Events created before the watch are not seen.
type EventWatch struct{ *watcher }

// WatchEvents starts watching the pod events in namespace ns.
func WatchEvents(ctx context.Context, k kubernetes.Interface, ns string) (*EventWatch, error) {
	list, err := k.CoreV1().Events(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("listing events in %s: %w", ns, err)
	}
	const sel = "involvedObject.kind=Pod"
	w := startWatcher(ctx, list.ResourceVersion, func(ctx context.Context, rv string) (watch.Interface, error) {
		wi, err := k.CoreV1().Events(ns).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
		if err != nil {
			return nil, fmt.Errorf("watching events in %s: %w", ns, err)
		}
		return wi, nil
	}, func(m *marks, obj any, at time.Time) {
		if ev, ok := obj.(*corev1.Event); ok {
			m.set(ev.InvolvedObject.Name+"/"+ev.Reason, at)
		}
	})
	return &EventWatch{w}, nil
}

// Wait returns when the pod's first event with reason arrived, waiting up
// to timeout.
func (w *EventWatch) Wait(ctx context.Context, pod, reason string, timeout time.Duration) (time.Time, error) {
	at, err := w.wait(ctx, pod+"/"+reason, timeout)
	if err != nil {
		return at, fmt.Errorf("event %s of pod %s: %w", reason, pod, err)
	}
	return at, nil
}
