package k8scrio

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
)

// TestCRIONPWGNetworkStatus: a pod with the NPWG annotation naming a NAD
// gets net1 in the NAD's subnet on CRI-O, and network-status lists eth0
// (the runtime's, default) and net1 as seen in the pod. CRI-O ran the
// sandbox without an infra container (NRI Pid 0) and removed its netns
// before StopPodSandbox; deleting the pod still releases the NAD network's
// address, libcni's cache entry and nri-cni's record, by a DEL with an
// empty netns.
func TestCRIONPWGNetworkStatus(t *testing.T) {
	f := newFixture(t)
	nad := f.newNAD(harness.RandomName("nad-crio-"))
	// The driver republishes after nri-cni's NAD cache saw the object: then
	// the attach finds it at once (else the first sandbox fails, retried).
	f.waitDevice("default/" + nad.Name)

	name := harness.RandomName("npwg-")
	f.create(f.pod(name, map[string]string{npwgAnnotation: nad.Name}))
	pod := f.waitReady(name)
	net1 := f.iface(pod, "net1")
	assert.True(t, contains(nad.Subnet, net1.Addrs[0].String()), "net1 %s in the NAD's subnet %s", net1.Addrs[0], nad.Subnet)

	st := f.networkStatus(name, 2)
	t.Logf("network-status of %s: %+v", name, st)
	assert.Equal(t, "eth0", st[0].Interface)
	assert.True(t, st[0].Default, "entry 0 is the runtime's network")
	assert.Equal(t, []string{pod.Status.PodIP}, st[0].IPs)
	assert.Equal(t, "default/"+nad.Name, st[1].Name)
	assert.Equal(t, "net1", st[1].Interface)
	assert.Equal(t, []string{net1.Addrs[0].IP.String()}, st[1].IPs)
	assert.Equal(t, net1.MAC, st[1].Mac)
	assert.False(t, st[1].Default)

	id, _ := f.readySandbox(pod)
	run := f.event("RunPodSandbox", id)
	assert.Zero(t, run.Pid, "CRI-O dropped the infra container: NRI gets Pid 0")
	assert.True(t, run.NetnsExists, "the pinned netns exists at RunPodSandbox")
	require.NotEmpty(t, f.w.o.IPFilesOf(nad.CNIName, id), "the NAD network's address allocated")

	f.deletePod(name)
	stop := f.event("StopPodSandbox", id)
	assert.False(t, stop.NetnsExists, "CRI-O removed the netns before NRI StopPodSandbox (%s)", stop.Namespaces["network"])
	f.waitReleased(id)
	assert.Empty(t, f.w.o.IPFilesOf(nad.CNIName, id), "the NAD network's address released")
	f.assertDetachedWithoutNetns(id, 1)
}

// assertDetachedWithoutNetns: nri-cni logged want "network detached" lines
// for the sandbox, each DEL run with an empty netns (CRI-O had removed it),
// and the kubelet saw no StopPodSandbox fail (CRI-O, unlike containerd,
// hands an NRI plugin's Stop error back to it).
func (f *fixture) assertDetachedWithoutNetns(id string, want int) {
	f.t.Helper()
	lines := logLines(f.nriCNILog(), "network detached", id)
	assert.Len(f.t, lines, want, "one DEL per network of sandbox %s", id)
	for _, l := range lines {
		assert.Empty(f.t, logField(l, "netns"), "DEL with an empty netns: %s", l)
	}
	kubelet, err := os.ReadFile(f.w.c.KubeletLog())
	require.NoError(f.t, err)
	assert.Empty(f.t, klogEntries(string(kubelet), "StopPodSandbox from runtime service failed", id),
		"the kubelet's StopPodSandbox of %s failed", id)
}
