package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/kube/mnp"
	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
)

// mnpTestCRD is the smallest CRD that serves multi-networkpolicies (the
// shipped, upstream-compatible one is deploy/crds/multinetworkpolicy's).
const mnpTestCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: multi-networkpolicies.k8s.cni.cncf.io
spec:
  group: k8s.cni.cncf.io
  scope: Namespaced
  names: {plural: multi-networkpolicies, singular: multi-networkpolicy, kind: MultiNetworkPolicy, shortNames: [multi-policy]}
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

type countingApplier struct{ calls chan string }

func (a countingApplier) ApplyPolicy(_ context.Context, id string) error {
	select {
	case a.calls <- id:
	default:
	}
	return nil
}

// TestMultiNetworkPolicyCache, on a real API server (alone: no node, no
// root, nothing of the host's touched): kube/mnp's caches
// started before the MultiNetworkPolicy CRD exists say so (naming the CRD)
// and do not sync; once the CRD is applied they sync; a policy reaches the
// Snapshot, a remote pod's network-status reaches the peer index and a
// change of it follows; a local sandbox is re-applied on a policy change.
func TestMultiNetworkPolicyCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := cluster.StartAPIOnly(ctx, cluster.APIOnlyOpts{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })

	pc, err := mnp.NewPolicyClient(c.RESTConfig)
	require.NoError(t, err)
	const localNode = "mnp-local-node" // no node: its pods stay Pending
	applied := countingApplier{calls: make(chan string, 16)}
	m := mnp.New(c.Client, pc, mnp.Options{Node: localNode, Applier: applied, DiscoveryRetry: 500 * time.Millisecond})
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go m.Run(mctx)
	require.Eventually(t, func() bool { return errors.Is(m.SyncError(), mnp.ErrCRDNotServed) }, waitFor, 50*time.Millisecond,
		"the missing CRD is reported")
	assert.Contains(t, m.SyncError().Error(), v1beta1.CRDName)
	assert.False(t, m.Snapshot().Synced())

	crd := filepath.Join(t.TempDir(), "crd.yaml")
	require.NoError(t, os.WriteFile(crd, []byte(mnpTestCRD), 0o600))
	out, err := c.Kubectl(ctx, "apply", "-f", crd)
	require.NoError(t, err, out)
	t.Cleanup(func() { _, _ = c.Kubectl(context.Background(), "delete", "crd", v1beta1.CRDName, "--wait=false") })
	start := time.Now()
	require.NoError(t, m.WaitForSync(ctx))
	t.Logf("synced %s after the CRD was applied", time.Since(start).Round(time.Millisecond))
	require.NoError(t, m.SyncError())

	ns := harness.RandomName("mnp-")
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"team": "red"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	_, err = c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}) // no controller-manager to make it
	require.NoError(t, err)

	statusOf := func(ip string) string {
		return `[{"name":"cbr0","ips":["10.244.0.9"],"default":true},{"name":"` + ns + `/data","interface":"net1","ips":["` + ip + `"]}]`
	}
	mkPod := func(name, node, status string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "localhost/none:0",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}
		if status != "" {
			p.Annotations = map[string]string{mnp.AnnotationNetworkStatus: status}
		}
		return p
	}
	peer, err := c.Client.CoreV1().Pods(ns).Create(ctx, mkPod("peer", "mnp-other-node", statusOf("10.77.0.5")), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, mkPod("plain", "mnp-other-node", ""), metav1.CreateOptions{})
	require.NoError(t, err)
	local, err := c.Client.CoreV1().Pods(ns).Create(ctx, mkPod("local", localNode, ""), metav1.CreateOptions{})
	require.NoError(t, err)
	m.SetLocal("sandbox-1", mnp.LocalPod{Namespace: ns, Name: "local", UID: string(local.UID)}, nil)

	data := netpol.Identity{NAD: ns + "/data"}
	peerIP := func() string {
		for _, p := range m.Snapshot().Peers(ns) {
			if p.Name == "peer" && len(p.Addrs[data]) > 0 {
				return p.Addrs[data][0].String()
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return peerIP() == "10.77.0.5" }, waitFor, 50*time.Millisecond, "the peer reaches the index")
	for _, p := range m.Snapshot().Peers(ns) {
		assert.NotEqual(t, "plain", p.Name, "a pod without secondary networks is no peer")
	}

	patch := []byte(`{"metadata":{"annotations":{"` + mnp.AnnotationNetworkStatus + `":` + jsonString(statusOf("10.77.0.6")) + `}}}`)
	start = time.Now()
	_, err = c.Client.CoreV1().Pods(ns).Patch(ctx, peer.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return peerIP() == "10.77.0.6" }, waitFor, 10*time.Millisecond,
		"the network-status change reaches the peer index")
	t.Logf("a network-status patch reached the peer index in %s", time.Since(start).Round(time.Millisecond))

	drain := func() {
		for {
			select {
			case <-applied.calls:
			default:
				return
			}
		}
	}
	drain()
	pol := `apiVersion: k8s.cni.cncf.io/v1beta1
kind: MultiNetworkPolicy
metadata:
  name: allow-peer
  namespace: ` + ns + `
  annotations: {k8s.v1.cni.cncf.io/policy-for: data}
spec:
  podSelector: {matchLabels: {app: local}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: peer}}}]
    ports: [{protocol: TCP, port: http}]
`
	pf := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pf, []byte(pol), 0o600))
	start = time.Now()
	out, err = c.Kubectl(ctx, "apply", "-f", pf)
	require.NoError(t, err, out)
	select {
	case id := <-applied.calls:
		assert.Equal(t, "sandbox-1", id)
		t.Logf("a policy create reached the local sandbox's ApplyPolicy in %s", time.Since(start).Round(time.Millisecond))
	case <-time.After(waitFor):
		t.Fatal("the policy change never reached the local sandbox")
	}
	ps := m.Snapshot().Policies(ns)
	require.Len(t, ps, 1)
	assert.Equal(t, "data", ps[0].PolicyFor)
	require.NotNil(t, ps[0].Spec)
	assert.Equal(t, "http", ps[0].Spec.Ingress[0].Ports[0].Port.StrVal)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
