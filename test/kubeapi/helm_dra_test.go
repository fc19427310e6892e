package kubeapi

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/deploy"
)

// draPolicySlots are the DRA admission policies' and bindings' slots.
var draPolicySlots = []string{
	"ValidatingAdmissionPolicy/" + deploy.SlicePolicySuffix, "ValidatingAdmissionPolicyBinding/" + deploy.SlicePolicySuffix,
	"ValidatingAdmissionPolicy/" + deploy.ClaimPolicySuffix, "ValidatingAdmissionPolicyBinding/" + deploy.ClaimPolicySuffix,
	"ValidatingAdmissionPolicy/" + deploy.ClassPolicySuffix, "ValidatingAdmissionPolicyBinding/" + deploy.ClassPolicySuffix,
	"ConfigMap/" + deploy.ClassPolicySuffix,
}

// kubeletMounts are the DaemonSet's mounts of the kubelet's plugin dirs
// (mount path -> host path).
func kubeletMounts(o *deploy.Objects) map[string]string {
	b := deploy.Base{Objects: *o}
	out := map[string]string{}
	c := b.Container(deploy.ContainerName)
	if c == nil {
		return out
	}
	for _, m := range c.VolumeMounts {
		if v := b.Volume(m.Name); v != nil && v.HostPath != nil && strings.Contains(v.HostPath.Path, "kubelet") {
			out[m.MountPath] = v.HostPath.Path
		}
	}
	return out
}

// assertNoDRA: nothing of the DRA driver is rendered — no DeviceClass, no
// DRA policy, no rule on resource.k8s.io but reading ResourceSlices (other
// drivers' devices behind NADs) and getting claims (those NADs name), none
// on nodes, no kubelet mount, no
// kubernetes.dra in nri.conf.
func assertNoDRA(t *testing.T, o *deploy.Objects) {
	t.Helper()
	assert.Empty(t, o.DeviceClass.Name, "no DeviceClass")
	assert.Empty(t, o.SlicePolicy.Name, "no ResourceSlice policy")
	assert.Empty(t, o.ClaimPolicy.Name, "no claim status policy")
	for _, r := range o.ClusterRole.Rules {
		if slices.Equal(r.Resources, []string{"resourceslices"}) && slices.Equal(r.Verbs, []string{"list", "watch"}) {
			continue // the node's slices, read for device-backed networks
		}
		if slices.Equal(r.Resources, []string{"resourceclaims"}) && slices.Equal(r.Verbs, []string{"get"}) {
			continue // the claims NADs name (nri-cni.io/resourceClaim)
		}
		assert.NotContains(t, r.APIGroups, resourcev1.GroupName, "no DRA rule: %v", r)
		assert.NotContains(t, r.Resources, "nodes", "no DRA rule: %v", r)
	}
	assert.Empty(t, kubeletMounts(o), "no kubelet plugin dirs mounted")
	cfg := parseConf(t, o.ConfigMap.Data[deploy.ConfigKey])
	assert.False(t, cfg.Kubernetes.DRAOn(), "nri.conf: DRA off")
}

// TestHelmTemplateDRA: the DRA driver's values. On by default (the rest of
// the default rendering is TestHelmTemplateMatchesBase's); kubeletDir moves
// the mounts and nri.conf's kubeletDir together; the other keys reach
// nri.conf; off renders none of the driver's objects, rules or mounts; the
// policies follow the release's namespace.
func TestHelmTemplateDRA(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()

	on := h.template(ctx, t, "kube-system")
	assert.Equal(t, map[string]string{"/var/lib/kubelet/plugins/nri-cni.io": "/var/lib/kubelet/plugins/nri-cni.io",
		"/var/lib/kubelet/plugins_registry": "/var/lib/kubelet/plugins_registry"}, kubeletMounts(on))
	assert.Equal(t, dra.DriverName, on.DeviceClass.Name)

	const root = "/var/lib/k0s/kubelet"
	moved := h.template(ctx, t, "net-system", "--set", "kubernetes.dra.kubeletDir="+root+"/,kubernetes.dra.sharing=slots,"+
		"kubernetes.dra.slots=8,kubernetes.dra.maxDevices=64,kubernetes.dra.nads=false,kubernetes.dra.nodeNetworks={secondary}")
	assert.Equal(t, map[string]string{root + "/plugins/nri-cni.io": root + "/plugins/nri-cni.io", root + "/plugins_registry": root + "/plugins_registry"},
		kubeletMounts(moved), "mounted at the host's paths")
	cfg := parseConf(t, moved.ConfigMap.Data[deploy.ConfigKey])
	require.True(t, cfg.Kubernetes.DRAOn())
	d := cfg.Kubernetes.DRA
	assert.Equal(t, root, d.KubeletRoot(), "nri.conf names the mounted dir")
	assert.Equal(t, "slots", d.SharingMode())
	assert.Equal(t, 8, d.SlotCount())
	assert.Equal(t, 64, d.DeviceLimit())
	assert.False(t, d.PublishNADs())
	assert.Equal(t, []string{"secondary"}, d.NodeNetworks)
	for _, p := range []string{moved.SlicePolicy.Spec.MatchConditions[0].Expression, moved.ClaimPolicy.Spec.MatchConditions[0].Expression} {
		assert.Equal(t, "request.userInfo.username == 'system:serviceaccount:net-system:nri-cni'", p,
			"the DRA policies follow the release's namespace")
	}
	assert.Equal(t, "nri-cni-dra-slices", moved.SlicePolicyBinding.Spec.PolicyName)
	assert.Equal(t, "nri-cni-dra-claim-status", moved.ClaimPolicyBinding.Spec.PolicyName)

	off := h.template(ctx, t, "kube-system", "--set", "kubernetes.dra.enabled=false")
	assert.ElementsMatch(t, append([]string{"DeviceClass"}, draPolicySlots...), off.Missing())
	assertNoDRA(t, off)
	base, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	assert.Equal(t, base.ClusterRole.Rules[:5], off.ClusterRole.Rules, "the rules without DRA's (claims get stays: the claims NADs name)")

	_, err = h.run(ctx, "lint", "--strict", ChartDir(), "--set", "kubernetes.dra.enabled=false")
	assert.NoError(t, err)
}
