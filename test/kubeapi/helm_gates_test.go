package kubeapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/test/deploy"
)

// TestHelmRefusesDRAWithoutPolicy (issue 28, item 10): with the DRA driver
// on, policy.enabled=false would leave nri-cni's resourceclaims/status
// patch (any claim's whole status on 1.34 and 1.35) and its ResourceSlice
// writes (any node's, any driver's, on every version) unnarrowed. The chart
// refuses to render that, saying why and what to do; it renders with the
// policy on, with DRA off, or when the chart grants no RBAC.
func TestHelmRefusesDRAWithoutPolicy(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	out, err := h.run(ctx, "template", "nri-cni", ChartDir(), "--namespace", "kube-system", "--api-versions", mapV1,
		"--set", "policy.enabled=false")
	require.Error(t, err, "rendered:\n%s", out)
	for _, want := range []string{
		"policy.enabled=false with kubernetes.dra.enabled=true",
		"On Kubernetes 1.34 and 1.35 its token could then rewrite the status of any ResourceClaim in the cluster",
		"any node's and any driver's ResourceSlices",
		"Keep policy.enabled=true", "kubernetes.dra.enabled=false", "rbac.create=false",
	} {
		assert.Contains(t, err.Error(), want)
	}
	t.Logf("refused: %v", err)

	noDRA := h.template(ctx, t, "kube-system", "--set", "policy.enabled=false,kubernetes.dra.enabled=false")
	assertNoDRA(t, noDRA)
	assert.Empty(t, noDRA.Policy.Name)
	noRBAC := h.template(ctx, t, "kube-system", "--set", "policy.enabled=false,rbac.create=false")
	assert.Empty(t, noRBAC.ClusterRole.Name, "no RBAC rendered: the admin's to grant and narrow")
	assert.Empty(t, noRBAC.SlicePolicy.Name)
	on := h.template(ctx, t, "kube-system")
	assert.NotEmpty(t, on.ClaimPolicy.Name)
}

// TestHelmDeviceClasses (issue 28, item 8): kubernetes.dra.deviceClasses
// reaches nri.conf (the node's rule) and the admission policy's ConfigMap
// (the same lists, in the form the policy reads); without it the ConfigMap
// is empty (no rule). The policy and its binding are deploy/base's.
func TestHelmDeviceClasses(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	base, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)

	def := h.template(ctx, t, "kube-system")
	assert.Empty(t, def.ClassParams.Data, "no lists: no rule")
	assert.Nil(t, parseConf(t, def.ConfigMap.Data[deploy.ConfigKey]).Kubernetes.DRA.DeviceClasses)
	assert.Equal(t, base.ClassPolicy.Name, def.ClassPolicy.Name)
	assert.Equal(t, base.ClassPolicy.Spec, def.ClassPolicy.Spec, "deploy/base's policy")
	assert.Equal(t, base.ClassPolicyBinding.Spec, def.ClassPolicyBinding.Spec, "deploy/base's binding")
	assert.Equal(t, base.ClassParams.Name, def.ClassParams.Name)
	assert.Equal(t, base.ClassParams.Namespace, def.ClassParams.Namespace)
	assert.Empty(t, base.ClassParams.Data, "deploy/base ships no rule")

	set := h.template(ctx, t, "net-system", "--set-json",
		`kubernetes.dra.deviceClasses={"default":["team-net"],"namespaces":{"net-admins":["nri-cni.io","team-net"],"locked":[]}}`)
	assert.Equal(t, map[string]string{"default": "team-net", "namespaces.net-admins": "nri-cni.io, team-net",
		"namespaces.locked": ""}, set.ClassParams.Data)
	assert.Equal(t, "net-system", set.ClassParams.Namespace)
	require.NotNil(t, set.ClassPolicyBinding.Spec.ParamRef)
	assert.Equal(t, "net-system", set.ClassPolicyBinding.Spec.ParamRef.Namespace, "the binding follows the release's namespace")
	assert.Equal(t, set.ClassParams.Name, set.ClassPolicyBinding.Spec.ParamRef.Name)
	rule := parseConf(t, set.ConfigMap.Data[deploy.ConfigKey]).Kubernetes.DRA.DeviceClasses
	assert.Equal(t, &config.DeviceClassRule{Default: []string{"team-net"},
		Namespaces: map[string][]string{"net-admins": {"nri-cni.io", "team-net"}, "locked": {}}}, rule)

	_, err = h.run(ctx, "template", "nri-cni", ChartDir(), "--api-versions", mapV1, "--set-json",
		`kubernetes.dra.deviceClasses={"namespaces":{"a":["x"]}}`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubernetes.dra.deviceClasses.default: required")
}
