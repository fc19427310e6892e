package mnp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/kube/mnp/mnptest"
	"github.com/nri-cni/nri-cni/metrics"
	"github.com/nri-cni/nri-cni/netpol"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMNPSyncsAndFollowsChanges(t *testing.T) {
	core := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"team": "red"}}},
		pod("x", "server", node, "", map[string]string{"app": "server"}),
		pod("z", "peer", "node-b", status("x/net=10.1.0.9"), map[string]string{"app": "peer"}),
		pod("z", "plain", "node-b", "", nil))
	core.Discovery().(*fakediscovery.FakeDiscovery).Resources = mnptest.Discovered(true)
	big := ingressFrom(sel(), make([]networkingv1.NetworkPolicyPeer, 65)...)
	pc := &mnptest.Policies{W: watch.NewFake(), Items: []v1beta1.MultiNetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "p", UID: "u1", Generation: 1}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "huge", UID: "u2", Generation: 4}, Spec: big}}}
	f := &fakeApplier{}
	o := &fakeObserver{}
	rec := record.NewFakeRecorder(10)
	m := New(core, pc, Options{Node: node, Applier: f, Quarantiner: f, Observer: o, Recorder: rec, PropagationDelay: time.Millisecond})
	m.SetLocal("sx1", LocalPod{"x", "server", "uid-server"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	if err := m.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	s := m.Snapshot()
	if !s.Synced() || len(s.Policies("x")) != 2 || len(s.Peers("z")) != 1 || len(s.Namespaces()) != 1 {
		t.Fatalf("snapshot: synced %v, policies %v, peers of z %v", s.Synced(), s.Policies("x"), s.Peers("z"))
	}
	if p := s.Policies("x")[0]; p.Name != "huge" || !p.Oversize {
		t.Errorf("the policy past a cap: %+v", p)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, ReasonInvalid) || !strings.Contains(e, "65 peers") {
			t.Errorf("event %q", e)
		}
	case <-time.After(10 * time.Second):
		t.Error("no Event about the Oversize policy")
	}
	eventually(t, "the local sandbox applied after the sync", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.calls) > 0
	})
	// A peer's network-status changes: the index follows.
	upd := pod("z", "peer", "node-b", status("x/net=10.1.0.10"), map[string]string{"app": "peer"})
	if _, err := core.CoreV1().Pods("z").Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new peer IP in the snapshot", func() bool {
		ps := m.Snapshot().Peers("z")
		return len(ps) == 1 && ps[0].Addrs[netpol.Identity{NAD: "x/net"}][0] == addr("10.1.0.10")
	})
	pc.W.Delete(&v1beta1.MultiNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "huge", UID: "u2", Generation: 4}})
	eventually(t, "the deleted policy gone", func() bool { return len(m.Snapshot().Policies("x")) == 1 })
	o.mu.Lock()
	invalid := o.invalid
	o.mu.Unlock()
	if invalid != 0 {
		t.Errorf("invalid policies gauge %d after the only invalid one was deleted", invalid)
	}
	cancel()
	<-done
}

func TestMNPNotServed(t *testing.T) {
	core := fake.NewClientset()
	core.Discovery().(*fakediscovery.FakeDiscovery).Resources = mnptest.Discovered(false)
	m := New(core, &mnptest.Policies{W: watch.NewFake()}, Options{Node: node, Applier: &fakeApplier{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	eventually(t, "the CRD reported missing", func() bool { return errors.Is(m.SyncError(), ErrCRDNotServed) })
	if m.Synced() || m.Snapshot().Synced() {
		t.Error("synced without the MultiNetworkPolicy resource")
	}
	if !strings.Contains(m.SyncError().Error(), v1beta1.CRDName) {
		t.Errorf("the error does not name the CRD: %v", m.SyncError())
	}
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	if err := m.WaitForSync(wctx); !errors.Is(err, ErrCRDNotServed) {
		t.Errorf("WaitForSync: %v", err)
	}
}

// The metrics package is the Observer the binary hands in.
var _ Observer = (*metrics.Metrics)(nil)
