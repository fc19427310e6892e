package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/plan"
)

// fakeReplugger records Replug calls; fail makes the first n fail with
// err (fail < 0: every one). A call for a pod of namespace gateNS waits for
// gate first.
type fakeReplugger struct {
	mu     sync.Mutex
	calls  []attach.PodUpdate
	at     []time.Time
	fail   int
	err    error
	gateNS string
	gate   chan struct{}
	gated  atomic.Int32 // calls waiting at the gate
}

func (r *fakeReplugger) Replug(ctx context.Context, u attach.PodUpdate) (bool, error) {
	if r.gateNS != "" && u.Namespace == r.gateNS {
		r.gated.Add(1)
		defer r.gated.Add(-1)
		select {
		case <-r.gate:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, u)
	r.at = append(r.at, time.Now())
	if r.fail != 0 {
		r.fail--
		return false, r.err
	}
	return true, nil
}

func (r *fakeReplugger) snapshot() []attach.PodUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attach.PodUpdate(nil), r.calls...)
}

func TestPodWatcherHandsOverAnnotationChanges(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-web",
		Annotations: map[string]string{plan.AnnotationNPWGNetworks: "net-a"}}, Spec: corev1.PodSpec{NodeName: "node-1"}}
	c := fake.NewClientset(pod)
	r := &fakeReplugger{}
	w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	require.Eventually(t, func() bool { return len(r.snapshot()) == 1 }, waitFor, 5*time.Millisecond)
	first := r.snapshot()[0]
	assert.Equal(t, attach.PodUpdate{UID: "uid-web", Namespace: "ns1", Name: "web",
		Annotations: map[string]string{plan.AnnotationNPWGNetworks: "net-a"}, Changed: false}, first,
		"the initial list: a reconcile, not a change")

	update := func(mut func(*corev1.Pod)) {
		p, err := c.CoreV1().Pods("ns1").Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		mut(p)
		p.ResourceVersion = time.Now().Format("150405.000000000")
		_, err = c.CoreV1().Pods("ns1").Update(ctx, p, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	// Another annotation or a label: not handed over.
	update(func(p *corev1.Pod) { p.Annotations["other"] = "x"; p.Labels = map[string]string{"a": "b"} })
	// The networks annotation: handed over as a change.
	update(func(p *corev1.Pod) { p.Annotations[plan.AnnotationNPWGNetworks] = "net-a, net-b" })
	require.Eventually(t, func() bool { return len(r.snapshot()) == 2 }, waitFor, 5*time.Millisecond)
	second := r.snapshot()[1]
	assert.True(t, second.Changed)
	assert.Equal(t, "net-a, net-b", second.Annotations[plan.AnnotationNPWGNetworks])
	// nri-cni's own annotation counts too.
	update(func(p *corev1.Pod) { p.Annotations[plan.AnnotationNetworks] = "secondary" })
	require.Eventually(t, func() bool { return len(r.snapshot()) == 3 }, waitFor, 5*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Len(t, r.snapshot(), 3, "the label/other-annotation update was not handed over")
}

func TestPodWatcherRetriesABusyManagerButNotARefusal(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-web",
		Annotations: map[string]string{plan.AnnotationNPWGNetworks: "net-a"}}, Spec: corev1.PodSpec{NodeName: "node-1"}}
	for _, tc := range []struct {
		name  string
		err   error
		calls int
	}{
		{"busy", attach.ErrBusy, 3},
		{"refused", attach.ErrHotplugRefused, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(pod.DeepCopy())
			r := &fakeReplugger{fail: 2, err: tc.err}
			w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour, BaseDelay: 200 * time.Millisecond})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); w.Run(ctx, time.Second) }()
			defer func() { cancel(); <-done }()
			require.Eventually(t, func() bool { return len(r.snapshot()) >= tc.calls }, waitFor, 5*time.Millisecond)
			time.Sleep(1500 * time.Millisecond) // past the backoff of a retry that should not come
			assert.Len(t, r.snapshot(), tc.calls)
		})
	}
}

// runWatcher runs w until the test ends.
func runWatcher(t *testing.T, w *PodWatcher) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, w.HasSynced, waitFor, 5*time.Millisecond)
	return ctx
}

func annotatedPod(ns, name, value string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
		Annotations: map[string]string{plan.AnnotationNPWGNetworks: value}}, Spec: corev1.PodSpec{NodeName: "node-1"}}
}

func setAnnotation(t *testing.T, ctx context.Context, c *fake.Clientset, ns, name, value string) {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	p.Annotations[plan.AnnotationNPWGNetworks] = value
	p.ResourceVersion = time.Now().Format("150405.000000000")
	_, err = c.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// A hot-plug that keeps failing is tried Attempts times for one annotation
// value, with backoff, then given up: the first failure raises the Warning
// Event, the tries between are quiet, the last one's Event says it gave
// up. A resync does not try it again; a change of the annotation does.
func TestPodWatcherGivesUpOnAFailingValue(t *testing.T) {
	c := fake.NewClientset(annotatedPod("ns1", "web", "broken"))
	r := &fakeReplugger{fail: -1, err: errors.New("pool exhausted")}
	w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour, Attempts: 3,
		BaseDelay: 10 * time.Millisecond, RetryAfter: time.Hour})
	ctx := runWatcher(t, w)

	require.Eventually(t, func() bool { return len(r.snapshot()) >= 3 }, waitFor, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // past the backoff of a try that should not come
	w.ResyncAll()
	time.Sleep(100 * time.Millisecond)
	calls := r.snapshot()
	require.Len(t, calls, 3, "three tries, then nothing: not the backoff, not a resync")
	assert.False(t, calls[0].Quiet, "the first failure raises the Event")
	assert.Empty(t, calls[0].GiveUp)
	assert.True(t, calls[1].Quiet, "a retry's failure does not")
	assert.Equal(t, "hot-plug gave up on this annotation value after 3 tries; it tries again when the annotation changes, or in 1h0m0s",
		calls[2].GiveUp, "the last one's Event says so")

	setAnnotation(t, ctx, c, "ns1", "web", "broken, other")
	require.Eventually(t, func() bool { return len(r.snapshot()) >= 4 }, waitFor, 5*time.Millisecond)
	next := r.snapshot()[3]
	assert.True(t, next.Changed)
	assert.False(t, next.Quiet, "a new value: its first failure is reported")
	assert.Empty(t, next.GiveUp)
}

// A value given up on is tried again once every RetryAfter (its Event
// says it gave up again, the same message: the API server counts it).
func TestPodWatcherRetriesAGivenUpValueAfterAWhile(t *testing.T) {
	const retryAfter = 400 * time.Millisecond
	c := fake.NewClientset(annotatedPod("ns1", "web", "broken"))
	r := &fakeReplugger{fail: -1, err: errors.New("pool exhausted")}
	w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour, Attempts: 2,
		BaseDelay: 10 * time.Millisecond, RetryAfter: retryAfter})
	runWatcher(t, w)
	require.Eventually(t, func() bool { return len(r.snapshot()) >= 3 }, waitFor, 5*time.Millisecond)
	r.mu.Lock()
	gap, third := r.at[2].Sub(r.at[1]), r.calls[2]
	r.mu.Unlock()
	assert.GreaterOrEqual(t, gap, retryAfter, "not before RetryAfter")
	assert.Contains(t, third.GiveUp, "gave up")
	assert.False(t, third.Changed, "a resync of a pod with no change")
}

// A refused value is tried once; a resync does not try it again, a change
// does.
func TestPodWatcherRefusalWaitsForAChange(t *testing.T) {
	c := fake.NewClientset(annotatedPod("ns1", "web", "other/net"))
	r := &fakeReplugger{fail: 1, err: attach.ErrHotplugRefused}
	w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour, BaseDelay: 10 * time.Millisecond})
	ctx := runWatcher(t, w)
	require.Eventually(t, func() bool { return len(r.snapshot()) == 1 }, waitFor, 5*time.Millisecond)
	w.ResyncAll()
	time.Sleep(200 * time.Millisecond)
	assert.Len(t, r.snapshot(), 1)
	setAnnotation(t, ctx, c, "ns1", "web", "net")
	require.Eventually(t, func() bool { return len(r.snapshot()) == 2 }, waitFor, 5*time.Millisecond)
	assert.True(t, r.snapshot()[1].Changed)
}

// A pod busy with another operation (or a NAD cache still filling) is no
// failure of its own: retried with backoff, never given up on.
func TestPodWatcherDoesNotCountABusyPod(t *testing.T) {
	c := fake.NewClientset(annotatedPod("ns1", "web", "net"))
	r := &fakeReplugger{fail: 4, err: attach.ErrBusy}
	w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour, Attempts: 2, BaseDelay: 10 * time.Millisecond})
	runWatcher(t, w)
	require.Eventually(t, func() bool { return len(r.snapshot()) == 5 }, waitFor, 5*time.Millisecond)
	for _, u := range r.snapshot() {
		assert.False(t, u.Quiet)
		assert.Empty(t, u.GiveUp)
	}
}

// The workers take the pods namespace by namespace in turn: a pod of
// another namespace, queued behind many of one namespace's pods whose
// hot-plugs are slow, is taken after at most one more of them — not after
// the whole queue.
func TestPodWatcherSharesTheWorkersAcrossNamespaces(t *testing.T) {
	const hostile = 10
	var objs []runtime.Object
	for i := range hostile {
		objs = append(objs, annotatedPod("hostile", fmt.Sprintf("h%02d", i), "broken"))
	}
	c := fake.NewClientset(objs...)
	r := &fakeReplugger{gateNS: "hostile", gate: make(chan struct{})}
	w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour, Workers: 1})
	ctx := runWatcher(t, w)
	// One hostile pod with the worker (waiting at the gate), the rest queued.
	require.Eventually(t, func() bool { return r.gated.Load() == 1 && w.queue.Len() == hostile-1 }, waitFor, 5*time.Millisecond)
	_, err := c.CoreV1().Pods("victim").Create(ctx, annotatedPod("victim", "db", "storage"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.queue.Len() == hostile }, waitFor, 5*time.Millisecond)

	hostileBefore := -1
	for hostileBefore < 0 {
		for i, u := range r.snapshot() {
			if u.Namespace == "victim" {
				hostileBefore = i
			}
		}
		if hostileBefore >= 0 {
			break
		}
		select {
		case r.gate <- struct{}{}:
		case <-time.After(waitFor):
			t.Fatal("no hot-plug came to the gate")
		}
	}
	assert.LessOrEqual(t, hostileBefore, 2, "the one being worked on, at most one more: not the %d queued", hostile-1)
	t.Logf("hostile hot-plugs before the victim's: %d of %d", hostileBefore, hostile)
	close(r.gate)
}
