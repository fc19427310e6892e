package kube

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/plan"
)

// fakeReplugger records Replug calls; fail makes the first n fail.
type fakeReplugger struct {
	mu    sync.Mutex
	calls []attach.PodUpdate
	fail  int
	err   error
}

func (r *fakeReplugger) Replug(_ context.Context, u attach.PodUpdate) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, u)
	if r.fail > 0 {
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
			w := NewPodWatcher(c, "node-1", r, quietLog(), PodWatchOptions{Resync: time.Hour})
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
