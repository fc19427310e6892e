package integration

import (
	"context"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/reconcile"
)

// TestDriftCheckOnASharedBridge: pods leaving a bridge change its MAC (a
// Linux bridge takes the lowest MAC of its ports), which the reference
// bridge plugin's CHECK compares with the one cached at ADD. That is not the
// remaining pods' drift: nri-cni's CHECK leaves host-side MACs out, so only a
// real change inside a pod is reported. (Before that, this test saw about
// half of the checks fail.)
func TestDriftCheckOnASharedBridge(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	var pods []*pod
	for i := 0; i < 6; i++ {
		p := e.newPod()
		require.NoError(t, e.run(p, p.pid))
		pods = append(pods, p)
	}
	checked := 0
	for len(pods) > 1 {
		// One pod leaves (the first, then the last, alternating), the rest
		// are checked.
		j := 0
		if len(pods)%2 == 0 {
			j = len(pods) - 1
		}
		require.NoError(t, e.stop(pods[j]))
		require.NoError(t, e.remove(pods[j]))
		pods = append(pods[:j], pods[j+1:]...)
		res := reconcile.CheckAttachments(ctx, e.mgr)
		assert.Equal(t, reconcile.CheckResult{Checked: len(pods)}, res, "no drift while other pods come and go")
		checked += res.Checked
	}
	t.Logf("%d checks after pods left the bridge, none failed", checked)

	// Real drift: net1 deleted in the last pod.
	require.NoError(t, pods[0].netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}))
	assert.Equal(t, reconcile.CheckResult{Checked: 1, Failed: 1}, reconcile.CheckAttachments(ctx, e.mgr))
	require.NoError(t, e.stop(pods[0]))
	require.NoError(t, e.remove(pods[0]))
	assert.Empty(t, e.ipamFiles())
}
