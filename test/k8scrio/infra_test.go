package k8scrio

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// TestCRIOInfraDroppedPidZero: the kubelet's default setup on CRI-O runs a
// pod sandbox without an infra (pause) container: CRI reports no sandbox
// process and NRI's RunPodSandbox carries Pid 0 with the pinned netns. A
// pod asking for nri-cni's network by its own annotation gets net1 from
// that pinned path alone, and its pause container runs in that netns.
func TestCRIOInfraDroppedPidZero(t *testing.T) {
	f := newFixture(t)
	require.True(t, f.w.c.CRIO.DropInfra, "the node's CRI-O drops the infra container (drop_infra_ctr, its default)")
	name := harness.RandomName("infra-")
	f.create(f.pod(name, map[string]string{k8sdeploy.Annotation: f.w.o.NetName}))
	pod := f.waitReady(name)
	id, st := f.readySandbox(pod)
	assert.Zero(t, st.Pid, "CRI reports no infra process (CRI-O's spoofed infra container)")
	run := f.event("RunPodSandbox", id)
	assert.Zero(t, run.Pid, "NRI RunPodSandbox: Pid 0")
	assert.Equal(t, st.NetnsPath, run.Namespaces["network"], "NRI gets the pinned netns")
	assert.True(t, run.NetnsExists)
	net1 := f.iface(pod, "net1")
	assert.True(t, contains(f.w.o.Subnet, net1.Addrs[0].String()), "net1 %s in %s", net1.Addrs[0], f.w.o.Subnet)
	assert.Len(t, logLines(f.nriCNILog(), "network attached", id), 1, "attached at RunPodSandbox")
}

// TestCRIOHostNetworkPod: CRI-O pins a bind of the host's netns for a
// hostNetwork pod and passes it to NRI like any pod's; nri-cni must see it
// is the host's and attach nothing, even when the pod asks for networks:
// the pod starts, no record, address or cache entry is made, and the host
// gets no net1 and nri-cni's bridge no port.
func TestCRIOHostNetworkPod(t *testing.T) {
	f := newFixture(t)
	_, err := net.InterfaceByName("net1")
	require.Error(t, err, "the host has a net1 of its own: this test could not tell nri-cni's from it")
	name := harness.RandomName("hostnet-")
	p := f.pod(name, map[string]string{k8sdeploy.Annotation: f.w.o.NetName})
	p.Spec.HostNetwork = true
	f.create(p)
	pod := f.waitReady(name)
	id, st := f.readySandbox(pod)
	assert.True(t, st.HostNetwork)
	run := f.event("RunPodSandbox", id)
	t.Logf("NRI RunPodSandbox of the hostNetwork pod: network namespace %q (exists %t, the host's %t)",
		run.Namespaces["network"], run.NetnsExists, run.NetnsIsHost)
	assert.True(t, run.NetnsIsHost, "CRI-O passes (a bind of) the host's netns for a hostNetwork pod")
	assert.Empty(t, f.w.o.NodeFiles(id), "nothing attached")
	_, err = net.InterfaceByName("net1")
	assert.Error(t, err, "no net1 in the host's netns")
	n, err := harness.BridgePorts(f.w.o.Bridge)
	require.NoError(t, err)
	assert.Equal(t, f.ports, n, "nri-cni's bridge got no port")
}
