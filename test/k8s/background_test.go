package k8s

// deploy/base ships backgroundAttach on: RunPodSandbox answers at once, the
// CNI chains run off the runtime's node-wide NRI lock, and the pod's first
// container waits for them (NRI CreateContainer). A failure there must hold
// the pod's containers — never run them without their networks — and the
// kubelet's retry must attach once the network can.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// TestAttachFailureHoldsTheContainers: a NAD whose pool has one address.
// The first pod takes it; the second passes planning (its sandbox starts)
// but its ADD fails (no address left), so its container never runs: it
// waits in CreateContainerError with nri-cni's message, its sandbox has no
// interface of the NAD and no record. (The first try may fail the
// container's start instead, StartError: with the await hook on, a
// container whose pod's attach was still running when it was created waits
// for it in an OCI hook, and the attach's failure fails the hook; the
// kubelet's retries are then refused at CreateContainer.) When the first
// pod is deleted, the kubelet's retry attaches the second one, which then
// starts with the address the first held.
func TestAttachFailureHoldsTheContainers(t *testing.T) {
	f := newFixture(t)
	name := harness.RandomName("nad-one-")
	bridge, subnet := k8sdeploy.NADBridge(), k8sdeploy.NADSubnet()
	only := strings.TrimSuffix(subnet, "0/24") + "10"
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "cni-" + name, "plugins": []any{
		map[string]any{"type": "bridge", "bridge": bridge, "isGateway": false, "ipMasq": false,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{
				"subnet": subnet, "rangeStart": only, "rangeEnd": only}}}}}}})
	require.NoError(t, err)
	f.createNAD("default", name, string(conf))
	t.Cleanup(func() { _ = deleteLink(bridge) })
	n := &nadNet{Namespace: "default", Name: name, CNIName: "cni-" + name, Bridge: bridge, Subnet: subnet, f: f}
	f.nodeDevices("default/" + name) // in nri-cni's cache

	first := f.create(f.pod(harness.RandomName("one-first-"), "default", map[string]string{npwgAnnotation: name}))
	p1 := f.waitReady("default", first.Name)
	assert.Equal(t, only, bareIP(f.iface(p1, "net1").Addrs[0].String()))

	second := f.create(f.pod(harness.RandomName("one-second-"), "default", map[string]string{npwgAnnotation: name}))
	// While an attach is still running (a loaded node), the container waits
	// with "still being attached; retry"; once it failed, with the
	// network's failure.
	var waiting string
	f.waitFor("the second pod's container held (CreateContainerError naming the network)", waitLong, func() (bool, string) {
		p, err := f.k.CoreV1().Pods("default").Get(f.ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerError" && strings.Contains(w.Message, name) {
				waiting = w.Message
				return true, ""
			}
		}
		return false, toJSON(p.Status)
	})
	t.Logf("the second pod's container waits: %s", waiting)
	f.waitEvent("default", second.Name, "NetworkAttachFailed", name)
	id, st := f.readySandbox(second) // its sandbox runs: planning passed
	// The kubelet's retries attach again (and roll back: no address): net1
	// exists for a moment during each. Between them the sandbox holds
	// neither an interface of the NAD nor an address.
	f.waitFor("the held pod's sandbox without net1 or an address (between the kubelet's retries)", waitLong, func() (bool, string) {
		_, has, err := harness.PodIface(st.NetnsPath, "net1")
		files := n.ipFiles(id)
		return err == nil && !has && len(files) == 0, fmt.Sprintf("net1 %t (%v), addresses %v", has, err, files)
	})
	p, err := f.k.CoreV1().Pods("default").Get(f.ctx, second.Name, metav1.GetOptions{})
	require.NoError(t, err)
	startFailed := false
	for _, cs := range p.Status.ContainerStatuses {
		assert.Nil(t, cs.State.Running, "container %s never ran without its network", cs.Name)
		assert.False(t, cs.Ready, "container %s not ready", cs.Name)
		if term := cs.LastTerminationState.Terminated; term != nil {
			startFailed = true
			assert.Equal(t, "StartError", term.Reason, "container %s never ran: only its start failed (the await hook)", cs.Name)
			assert.Contains(t, term.Message, name, "the hook's message names the network")
		} else {
			assert.Zero(t, cs.RestartCount)
		}
	}
	// A container whose start failed once counts as a stopped one to
	// restart, and the kubelet calls a pod of such containers (restartPolicy
	// Always) Running; otherwise the pod is still Pending. Ready it never is.
	if !startFailed {
		assert.NotEqual(t, corev1.PodRunning, p.Status.Phase)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			assert.Equal(t, corev1.ConditionFalse, c.Status, "the held pod is not Ready")
		}
	}

	f.deletePod("default", first.Name)
	p2 := f.waitReady("default", second.Name)
	assert.Equal(t, only, bareIP(f.iface(p2, "net1").Addrs[0].String()), "the address the first pod released")

	f.deletePod("default", second.Name)
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, n.ipFiles(f.seenIDs()...))
}
