package k8scrio

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
)

// TestCRIORestartKeepsClaimNetwork: CRI-O restarted under a running claim
// pod keeps the pod, its sandbox and its network: the same sandbox and
// address afterwards, nri-cni reconnected (its Synchronize lists the pod,
// with Pid 0, as CRI-O runs it without an infra container) and no second
// ADD; deleting the pod then releases everything once.
func TestCRIORestartKeepsClaimNetwork(t *testing.T) {
	f := newFixture(t)
	w := f.w
	f.waitDevice(w.o.NetName)
	tmpl := harness.RandomName("dra-restart-")
	f.claimTemplate(tmpl, w.o.NetName, `"interface":"dra0"`)
	name := harness.RandomName("dra-restart-")
	f.create(f.claimPod(name, tmpl))
	pod := f.waitReady(name)
	id, st := f.readySandbox(pod)
	addr := f.iface(pod, "dra0").Addrs[0].String()
	claim := f.podClaim(pod, tmpl)

	synced := w.d.Registrations()
	require.NoError(t, w.c.RestartRuntime(f.ctx))
	_, err := w.d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err, "nri-cni registered with the restarted CRI-O")
	f.obs, err = w.observer(f.ctx, true)
	require.NoError(t, err)
	var resynced bool
	for _, e := range f.obs.Of(id) {
		if e.Event == "Synchronize" {
			resynced = true
			assert.Zero(t, e.Pid, "Synchronize reports the infra-less pod with Pid 0")
			assert.True(t, e.NetnsExists, "its pinned netns kept over the restart")
		}
	}
	assert.True(t, resynced, "the restarted CRI-O lists the pod at Synchronize")

	pod = f.waitReady(name)
	id2, st2 := f.readySandbox(pod)
	assert.Equal(t, id, id2, "same sandbox")
	assert.Equal(t, st.NetnsPath, st2.NetnsPath, "same netns")
	itf, ok, err := harness.PodIface(st2.NetnsPath, "dra0")
	require.NoError(t, err)
	require.True(t, ok, "dra0 still there")
	assert.Equal(t, addr, itf.Addrs[0].String(), "same address")
	assert.Len(t, logLines(f.nriCNILog(), "network attached", id), 1, "one ADD for the sandbox, none after the restart")

	f.deletePod(name)
	f.waitReleased(id)
	f.waitClaimReleased(string(claim.UID))
	f.assertDetachedWithoutNetns(id, 1)
}
