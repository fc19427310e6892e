package attach_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// A pod's prepared claims attach with its annotation's networks, inside
// the same attach: recorded with their claim, reported with the CNI
// result, torn down with the sandbox.
func TestClaimsAttachWithTheAnnotation(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", map[string]any{"capabilities": map[string]any{"mac": true}})
	sb := attachtest.NPWGPod("sb1", "net-a")
	pc := kf.Claim(sb, "claim-1", map[string]string{
		"alpha":     `"interface":"data0"`,
		"ns1/net-a": `"mac":"02:00:00:00:00:0c"`,
	})

	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	assert.Equal(t, []string{"ADD cni-a net1", "ADD alpha data0", "ADD cni-a net2"}, kf.Cmds())
	assert.JSONEq(t, `{"mac":"02:00:00:00:00:0c"}`, string(kf.Calls()[2].RuntimeConfig))

	require.Len(t, rec.Networks, 3)
	assert.Nil(t, rec.Networks[0].Claim, "the annotation's network")
	assert.Empty(t, rec.Networks[0].Result, "results are kept for claims only")
	for i, dev := range pc.Devices {
		n := rec.Networks[i+1]
		require.NotNil(t, n.Claim)
		assert.Equal(t, dev.Ref, *n.Claim)
		var res struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		}
		require.NoError(t, json.Unmarshal(n.Result, &res), "the CNI result is kept")
		assert.Equal(t, "10.99.0.5/24", res.IPs[0].Address)
	}
	assert.Equal(t, "ns1/net-a", rec.Networks[2].NAD)

	status, failures := kf.Sink.Snapshot()
	require.Empty(t, failures)
	require.Len(t, status, 1)
	got := status[0].Networks
	require.Len(t, got, 4)
	assert.Equal(t, "alpha", got[2].Name)
	assert.Equal(t, &pc.Devices[0].Ref, got[2].Claim)
	assert.Equal(t, []string{"10.99.0.5/24"}, got[2].IPNets)
	assert.NotEmpty(t, got[2].Result)
	assert.Equal(t, "ns1/net-a", got[3].Name)
	assert.Nil(t, got[1].Claim)

	require.NoError(t, kf.Mgr.Detach(context.Background(), sb, true))
	assert.Equal(t, []string{"DEL cni-a net2", "DEL alpha data0", "DEL cni-a net1"}, kf.Cmds()[3:])
}

// A claim that no longer passes the gates fails the sandbox with the claim
// named, before anything is recorded or ADDed.
func TestClaimRefusedAtAttachNamesTheClaim(t *testing.T) {
	kf := attachtest.NewKube(t, func(c *config.Config) { c.PodCapabilities = nil })
	sb := attachtest.Pod("sb1", 42)
	kf.Claim(sb, "claim-1", map[string]string{"alpha": `"mac":"02:00:00:00:00:0c"`})
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.ErrorIs(t, err, plan.ErrCapabilityNotAllowed)
	assert.Contains(t, err.Error(), `ResourceClaim ns1/claim-1 request "req-alpha"`)
	assert.Empty(t, kf.Calls())
	_, err = kf.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

// Multus writes network-status where it is the primary network; the claims'
// status is nri-cni's all the same.
func TestClaimStatusWhileMultusOwnsNetworkStatus(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.Multus = func() string { return "/etc/cni/net.d/00-multus.conf" }
	kf.Reconfigure(func(*config.Config) {})
	sb := attachtest.Pod("sb1", 42)
	kf.Claim(sb, "claim-1", map[string]string{"alpha": ""})
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	status, _ := kf.Sink.Snapshot()
	require.Len(t, status, 1)
	assert.True(t, status[0].ClaimsOnly)
}

// Hot-plug follows the annotation; the claims stay as they are.
func TestHotplugKeepsClaims(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	kf.Claim(sb, "claim-1", map[string]string{"alpha": ""})
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	assert.Equal(t, []string{"ns1/net-a@net1", "@net2"}, networks(kf, "sb1"))

	changed, err := replug(kf, sb, "net-b")
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"@net2", "ns1/net-b@net1"}, networks(kf, "sb1"))
	assert.NotContains(t, kf.Cmds(), "DEL alpha net2")

	rec, err := kf.Store.Get("sb1")
	require.NoError(t, err)
	require.NotNil(t, rec.Networks[0].Claim, "the claim's network kept its claim")
}
