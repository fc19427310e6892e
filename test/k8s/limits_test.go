package k8s

// Issue 18 on the real kubelet: a hostile pod's annotations cannot stall
// the node.

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// TestHostilePodIsRefusedWhileOthersStart: a pod asking for 300 networks
// (the NPWG comma form, as a tenant writes it) is refused at once with an
// error naming limits.maxNetworksPerPod — nothing is ADDed, nothing is left
// on the node — while a pod created right after it starts as usual, and
// containerd never drops nri-cni for missing its NRI deadline.
func TestHostilePodIsRefusedWhileOthersStart(t *testing.T) {
	f := newFixture(t)
	net := f.w.o.NetName
	f.createNAD("default", net, "") // empty spec.config: the confDir network
	closedBefore := f.w.c.Containerd.CountLog("closing plugin")

	// The normal time of this node, just before.
	t0 := time.Now()
	base := f.create(f.pod(harness.RandomName("limits-base-"), "default", map[string]string{k8sdeploy.Annotation: net}))
	f.waitReady("default", base.Name)
	baseline := since(t0)

	hostile := f.create(f.pod(harness.RandomName("limits-300-"), "default",
		map[string]string{npwgAnnotation: strings.TrimSuffix(strings.Repeat(net+",", 300), ",")}))
	tH := time.Now()
	t1 := time.Now()
	other := f.create(f.pod(harness.RandomName("limits-other-"), "default", map[string]string{k8sdeploy.Annotation: net}))
	o := f.waitReady("default", other.Name)
	otherTime := since(t1)
	_, st := f.readySandbox(o)
	_, ok := f.net1(st.NetnsPath)
	assert.True(t, ok, "the other pod has net1")

	msg := f.waitEvent("default", hostile.Name, "FailedCreatePodSandBox", "limits.maxNetworksPerPod", "300 networks")
	refused := since(tH)
	f.waitEvent("default", hostile.Name, "NetworkAttachFailed", "limits.maxNetworksPerPod")
	t.Logf("refused in %s (create to the kubelet's FailedCreatePodSandBox event): %s", refused, msg)
	t.Logf("create to Ready: a pod before the hostile one %s, one created right after it %s", baseline, otherTime)

	p, err := f.k.CoreV1().Pods("default").Get(f.ctx, hostile.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodPending, p.Status.Phase)
	assert.Empty(t, f.nodeFiles(f.sandboxes(string(hostile.UID))...), "a refused sandbox leaves nothing on the node")
	assert.Equal(t, closedBefore, f.w.c.Containerd.CountLog("closing plugin"),
		"containerd never dropped nri-cni for missing the NRI deadline")
	assert.Zero(t, countLog(f.nriCNILog(), "CNI ADD", ""), "no ADD ran for the hostile pod")
}
