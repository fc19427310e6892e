package k8scrio

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdra"
)

// TestCRIODRAClaimReleasedAfterNetnsRemoved: a pod whose ResourceClaim
// (from a template selecting the shipped network by the device attribute)
// asks for interface dra0 gets it on CRI-O; the claim's status.devices
// carries networkData (interface, address, MAC) and a Ready condition, and
// network-status lists it. Deleting the pod — CRI-O removing the netns
// before NRI StopPodSandbox — releases the address (host-local's file),
// libcni's cache entry, nri-cni's record and its prepared-claim record.
func TestCRIODRAClaimReleasedAfterNetnsRemoved(t *testing.T) {
	f := newFixture(t)
	net := f.w.o.NetName
	f.waitDevice(net)
	tmpl := harness.RandomName("dra-crio-")
	f.claimTemplate(tmpl, net, `"interface":"dra0"`)
	name := harness.RandomName("dra-crio-")
	f.create(f.claimPod(name, tmpl))
	pod := f.waitReady(name)
	dra0 := f.iface(pod, "dra0")
	sec := f.w.o.Secondary()
	assert.True(t, contains(sec.Subnet, dra0.Addrs[0].String()), "dra0 %s in %s", dra0.Addrs[0], sec.Subnet)

	claim := f.podClaim(pod, tmpl)
	st := f.claimStatus(claim.Name)
	assert.Equal(t, f.w.c.NodeName, st.Pool)
	require.Len(t, st.Conditions, 1)
	assert.Equal(t, "Ready", st.Conditions[0].Type)
	assert.Equal(t, metav1.ConditionTrue, st.Conditions[0].Status)
	assert.Equal(t, "dra0", st.NetworkData.InterfaceName)
	assert.Equal(t, []string{dra0.Addrs[0].String()}, st.NetworkData.IPs)
	assert.Equal(t, dra0.MAC, st.NetworkData.HardwareAddress)
	ns := f.networkStatus(name, 2)
	assert.Equal(t, "dra0", ns[1].Interface)
	assert.Equal(t, []string{dra0.Addrs[0].IP.String()}, ns[1].IPs)

	id, _ := f.readySandbox(pod)
	assert.Zero(t, f.event("RunPodSandbox", id).Pid, "no infra container: NRI Pid 0")
	assert.True(t, k8sdra.ClaimRecorded(f.w.o.StateDir, string(claim.UID)), "the prepared claim is recorded")
	ipFiles := sec.IPFilesOf(id)
	require.Len(t, ipFiles, 1, "host-local holds dra0's address")
	cached := f.w.o.NodeFiles(id)
	t.Logf("node files of sandbox %s while it runs: %v", id, cached)

	f.deletePod(name)
	stop := f.event("StopPodSandbox", id)
	assert.False(t, stop.NetnsExists, "CRI-O removed the netns before NRI StopPodSandbox (%s)", stop.Namespaces["network"])
	f.waitReleased(id)
	f.waitClaimReleased(string(claim.UID))
	assert.False(t, sec.HasIP(ipFiles[0]), "host-local's file of %s removed", ipFiles[0])
	assert.Empty(t, f.w.o.NodeFiles(id), "record, address file and libcni cache entry of %s gone", id)
	f.assertDetachedWithoutNetns(id, 1)
}
