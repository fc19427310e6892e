package k8s

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// TestAnnotatedPod: a pod that asks for the example network gets net1 (seen
// in its netns, with an address of the overlay's subnet, a record, an
// address file and a cache entry); a pod without the annotation and an
// annotated pod in kube-system (excluded by the shipped ConfigMap) get
// nothing; `kubectl delete` releases the address, the record and the cache
// entry.
func TestAnnotatedPod(t *testing.T) {
	f := newFixture(t)
	netName := f.w.o.NetName
	_, subnet, err := net.ParseCIDR(f.w.o.Subnet)
	require.NoError(t, err)

	cases := []struct {
		name, ns string
		ann      map[string]string
		wantNet1 bool
	}{
		{harness.RandomName("annotated-"), "default", map[string]string{k8sdeploy.Annotation: netName}, true},
		{harness.RandomName("plain-"), "default", nil, false},
		{harness.RandomName("system-"), "kube-system", map[string]string{k8sdeploy.Annotation: netName}, false},
	}
	for _, c := range cases {
		f.create(f.pod(c.name, c.ns, c.ann))
	}
	pods := map[string]*corev1.Pod{}
	ids := map[string]string{}
	for _, c := range cases {
		pods[c.name] = f.waitReady(c.ns, c.name)
		id, st := f.readySandbox(pods[c.name])
		ids[c.name] = id
		addr, ok := f.net1(st.NetnsPath)
		assert.Equal(t, c.wantNet1, ok, "%s/%s: net1 in the pod's netns", c.ns, c.name)
		if !c.wantNet1 {
			assert.Empty(t, f.nodeFiles(id), "%s/%s: nothing on the node", c.ns, c.name)
			continue
		}
		ip, _, err := net.ParseCIDR(addr)
		require.NoError(t, err, "net1 address %q", addr)
		assert.True(t, subnet.Contains(ip), "net1 %s in the overlay's subnet %s", addr, subnet)
		assert.Len(t, f.nodeFiles(id), 3, "record, address file and cache entry of %s", id)
	}

	annotated := cases[0]
	out, err := f.w.c.Kubectl(f.ctx, "delete", "pod", "-n", annotated.ns, annotated.name, "--wait=true", "--timeout=3m")
	require.NoError(t, err)
	t.Logf("%s", out)
	f.waitReleased(ids[annotated.name])
	assert.Equal(t, 0, countBridgePorts(t, f), "no veth left on the bridge")
}

func countBridgePorts(t *testing.T, f *fixture) int {
	n, err := harness.BridgePorts(f.w.o.Bridge)
	require.NoError(t, err)
	return n
}

// TestDeploymentScale: a Deployment of 20 annotated replicas, scaled up from
// zero and back down to zero: every replica gets its own net1 address while
// it runs, and nothing is left afterwards — no record, no address file, no
// libcni cache entry of the network, no veth on the bridge.
func TestDeploymentScale(t *testing.T) {
	f := newFixture(t)
	const replicas = 20
	name := harness.RandomName("scale-")
	before := len(f.nodeFilesAll())
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{ownerLabel: f.owner}},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name, ownerLabel: f.owner},
					Annotations: map[string]string{k8sdeploy.Annotation: f.w.o.NetName}},
				Spec: f.pod("", "", nil).Spec,
			},
		},
	}
	_, err := f.k.AppsV1().Deployments("default").Create(f.ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	scale := func(n int) {
		start := time.Now()
		_, err := f.w.c.Kubectl(f.ctx, "scale", "deployment/"+name, "--replicas="+strconv.Itoa(n))
		require.NoError(t, err)
		f.waitFor(fmt.Sprintf("deployment %s at %d ready replicas", name, n), 5*time.Minute, func() (bool, string) {
			d, err := f.k.AppsV1().Deployments("default").Get(f.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			l, err := f.k.CoreV1().Pods("default").List(f.ctx, metav1.ListOptions{LabelSelector: "app=" + name})
			if err != nil {
				return false, err.Error()
			}
			return int(d.Status.ReadyReplicas) == n && len(l.Items) == n,
				fmt.Sprintf("%d ready replicas, %d pods", d.Status.ReadyReplicas, len(l.Items))
		})
		t.Logf("scaled to %d in %s", n, time.Since(start).Round(time.Millisecond))
	}
	scale(replicas)

	l, err := f.k.CoreV1().Pods("default").List(f.ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	require.NoError(t, err)
	ips := map[string]bool{}
	var ids []string
	for i := range l.Items {
		id, st := f.readySandbox(&l.Items[i])
		ids = append(ids, id)
		addr, ok := f.net1(st.NetnsPath)
		require.True(t, ok, "net1 in %s", l.Items[i].Name)
		ips[addr] = true
	}
	assert.Len(t, ips, replicas, "one address per replica")
	assert.Len(t, f.nodeFiles(ids...), 3*replicas, "a record, an address file and a cache entry per replica")
	assert.Equal(t, f.ports+replicas, countBridgePorts(t, f), "a veth per replica on the bridge")

	scale(0)
	f.waitReleased(ids...)
	assert.Equal(t, f.ports, countBridgePorts(t, f), "no veth left on the bridge")
	assert.Len(t, f.nodeFilesAll(), before, "records, address files, cache entries of the network as before")
}

// TestWrongNetwork: a pod naming a network nri-cni does not have fails its
// sandbox; the pod's Events show nri-cni's error (FailedCreatePodSandBox,
// naming the annotation and the network) and the kubelet retries. Fixing the
// annotation on the pending pod (`kubectl annotate --overwrite`) is enough:
// the kubelet builds the next sandbox from the updated pod, which starts with
// net1.
func TestWrongNetwork(t *testing.T) {
	f := newFixture(t)
	name, bad := harness.RandomName("wrongnet-"), harness.RandomName("nosuchnet-")
	pod := f.create(f.pod(name, "default", map[string]string{k8sdeploy.Annotation: bad}))

	var msg string
	f.waitFor("two FailedCreatePodSandBox events naming "+bad, waitLong, func() (bool, string) {
		evs, err := f.k.CoreV1().Events("default").List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err.Error()
		}
		n, seen := 0, []string{}
		for _, ev := range evs.Items {
			seen = append(seen, fmt.Sprintf("%s x%d: %.200s", ev.Reason, ev.Count, ev.Message))
			if ev.Reason == "FailedCreatePodSandBox" && strings.Contains(ev.Message, k8sdeploy.Annotation) && strings.Contains(ev.Message, bad) {
				n += max(int(ev.Count), 1)
				msg = ev.Message
			}
		}
		return n >= 2, fmt.Sprintf("%d matching; events %v", n, seen)
	})
	t.Logf("the pod's event: %s", msg)
	p, err := f.k.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodPending, p.Status.Phase)
	failed := f.sandboxes(string(pod.UID))
	assert.Empty(t, f.nodeFiles(failed...), "a refused sandbox leaves nothing")

	_, err = f.w.c.Kubectl(f.ctx, "annotate", "--overwrite", "pod", name, k8sdeploy.Annotation+"="+f.w.o.NetName)
	require.NoError(t, err)
	fixed := time.Now()
	p = f.waitReady("default", name)
	t.Logf("Ready %s after the annotation was fixed (kubelet backoff included)", time.Since(fixed).Round(time.Millisecond))
	id, st := f.readySandbox(p)
	_, ok := f.net1(st.NetnsPath)
	assert.True(t, ok, "net1 in the sandbox built from the fixed annotation")
	assert.Len(t, f.nodeFiles(id), 3)

	f.deletePod("default", name)
	f.waitReleased(f.seenIDs()...)
}
