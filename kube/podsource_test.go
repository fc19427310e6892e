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
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/plan"
)

// fakeSharedPods is a SharedPods the test drives.
type fakeSharedPods struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod
	hs   []cache.ResourceEventHandler
}

func (f *fakeSharedPods) AddEventHandler(h cache.ResourceEventHandler) {
	f.mu.Lock()
	f.hs = append(f.hs, h)
	f.mu.Unlock()
}

func (f *fakeSharedPods) Get(ns, name string) (*corev1.Pod, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[ns+"/"+name]
	return p, ok
}

func (f *fakeSharedPods) Keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.pods {
		out = append(out, k)
	}
	return out
}

func (f *fakeSharedPods) HasSynced() bool { return true }

func (f *fakeSharedPods) set(p *corev1.Pod) {
	f.mu.Lock()
	old := f.pods[p.Namespace+"/"+p.Name]
	f.pods[p.Namespace+"/"+p.Name] = p
	hs := f.hs
	f.mu.Unlock()
	for _, h := range hs {
		if old == nil {
			h.OnAdd(p, false)
		} else {
			h.OnUpdate(old, p)
		}
	}
}

// Hot-plug over a shared watch: the first pod is a reconcile, an
// annotation change a change, as with its own informer.
func TestSharedPodWatcher(t *testing.T) {
	feed := &fakeSharedPods{pods: map[string]*corev1.Pod{}}
	r := &fakeReplugger{}
	w := NewSharedPodWatcher(feed, r, quietLog(), PodWatchOptions{Resync: time.Hour})
	require.True(t, w.HasSynced())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	mk := func(rv, nets string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-web", ResourceVersion: rv,
			Annotations: map[string]string{plan.AnnotationNPWGNetworks: nets}}}
	}
	feed.set(mk("1", "net-a"))
	require.Eventually(t, func() bool { return len(r.snapshot()) == 1 }, waitFor, 5*time.Millisecond)
	assert.False(t, r.snapshot()[0].Changed)
	feed.set(mk("2", "net-a,net-b"))
	require.Eventually(t, func() bool { return len(r.snapshot()) == 2 }, waitFor, 5*time.Millisecond)
	got := r.snapshot()[1]
	assert.True(t, got.Changed, "an annotation change is a change")
	assert.Equal(t, "net-a,net-b", got.Annotations[plan.AnnotationNPWGNetworks])
}
