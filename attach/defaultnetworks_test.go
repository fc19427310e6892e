package attach_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
)

// TestDefaultNetworksSurviveHotplug: nri.conf's defaultNetworks are
// attached first at pod start (net1…netK, the annotation's after them) and
// recorded as such; hot-plug adds and removes the annotation's networks
// around them and never detaches one, also when the annotation goes.
func TestDefaultNetworksSurviveHotplug(t *testing.T) {
	kf := attachtest.NewKube(t, func(c *config.Config) {
		c.Kubernetes.Hotplug = true
		c.Networks, c.DefaultNetworks = nil, []string{"alpha", "kube-system/side"}
	})
	kf.NAD(plan.NADRef{Namespace: "kube-system", Name: "side"}, "cni-side", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-b"}, "cni-b", nil)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	assert.Equal(t, []string{"@net1", "kube-system/side@net2", "ns1/net-a@net3"}, networks(kf, "sb1"))
	rec, err := kf.Store.Get("sb1")
	require.NoError(t, err)
	assert.True(t, rec.Networks[0].Default && rec.Networks[1].Default && !rec.Networks[2].Default, "recorded as default networks")

	_, err = replug(kf, sb, "net-a, net-b")
	require.NoError(t, err)
	assert.Equal(t, []string{"@net1", "kube-system/side@net2", "ns1/net-a@net3", "ns1/net-b@net4"}, networks(kf, "sb1"))

	// The annotation emptied: only its networks go.
	_, err = replug(kf, sb, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"@net1", "kube-system/side@net2"}, networks(kf, "sb1"))

	assert.Equal(t, []string{"ADD alpha net1", "ADD cni-side net2", "ADD cni-a net3", "ADD cni-b net4", "DEL cni-b net4", "DEL cni-a net3"},
		kf.Cmds())
}

// TestMultusDefaultNetworkAnnotationFailsTheAttach: a pod nri-cni would
// attach networks to that asks Multus for another eth0 fails before any
// ADD, naming the annotation.
func TestMultusDefaultNetworkAnnotationFailsTheAttach(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	sb := attachtest.NPWGPod("sb1", "net-a")
	sb.Annotations[plan.AnnotationMultusDefaultNetwork] = "kube-system/calico"
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.ErrorIs(t, err, plan.ErrDefaultNetworkAnnotation)
	assert.Contains(t, err.Error(), `v1.multus-cni.io/default-network="kube-system/calico"`)
	assert.Empty(t, kf.Cmds(), "nothing added")
}
