package mnp

import (
	"context"
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
	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube/mnp/mnptest"
	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/ir"
)

// The engine's PolicySource: deny-all (and a NotSynced Event) before the
// caches synced; then the pod's rules from the API's labels (the target
// came without any, as after a restart), with the remote peer's address.
func TestSourceRender(t *testing.T) {
	core := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "z"}},
		pod("x", "server", node, "", map[string]string{"app": "server"}),
		pod("z", "peer", "node-b", status("x/net=10.1.0.9"), map[string]string{"app": "peer"}))
	core.Discovery().(*fakediscovery.FakeDiscovery).Resources = mnptest.Discovered(true)
	spec := ingressFrom(sel("app", "server"), networkingv1.NetworkPolicyPeer{NamespaceSelector: sel(), PodSelector: sel("app", "peer")})
	pc := &mnptest.Policies{W: watch.NewFake(), Items: []v1beta1.MultiNetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "p",
		UID: "u1", Generation: 1, Annotations: map[string]string{netpol.PolicyForAnnotation: "net"}}, Spec: spec}}}
	f := &fakeApplier{}
	rec := record.NewFakeRecorder(10)
	m := New(core, pc, Options{Node: node, Applier: f, Quarantiner: f, Recorder: rec, PropagationDelay: time.Millisecond})
	src := m.Source(netpol.Options{Limits: netpol.DefaultLimits()})
	target := ir.Target{Namespace: "x", Name: "server", UID: "uid-server",
		Interfaces: []ir.Interface{{IfName: "net1", Identity: ir.Identity{NAD: "x/net"}}}}

	rs, _, err := src.Render(context.Background(), target)
	if err != nil || len(rs.Chains) != 2 {
		t.Fatalf("before the sync: %v, %d chains, want deny-all in both directions", err, len(rs.Chains))
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, ReasonNotSynced) {
			t.Errorf("event %q, want %s", e, ReasonNotSynced)
		}
	case <-time.After(10 * time.Second):
		t.Error("no NotSynced Event")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	if err := m.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the server pod with its labels in the index", func() bool {
		_, _, ok := m.TargetOf("x", "server", "uid-server")
		return ok
	})
	src.SetLocal(attach.PolicyPod{Namespace: "x", Name: "server", UID: "uid-server", SandboxID: "sx1"}, target.Interfaces)
	rs, _, err = src.Render(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	text := rs.String()
	if len(rs.Chains) != 1 || rs.Chains[0].Direction != ir.Ingress || !strings.Contains(text, "10.1.0.9") {
		t.Errorf("after the sync, want the ingress chain allowing 10.1.0.9:\n%s", text)
	}
	cancel()
	<-done
}
