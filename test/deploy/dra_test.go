package deploy

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/nri-cni/nri-cni/kube/dra"
)

// draRules are the ClusterRole's rules for the DRA driver: the claims the
// kubelet plugin helper reads at prepare, the status kube/claimstatus.go
// patches (resourceclaims/status; from 1.36 also resourceclaims/driver for
// nri-cni.io with the associated-node verbs), the helper's ResourceSlice
// controller (list/watch by driver and node, create, update, delete)
// and the node it owns its slices by.
var draRules = []rbacv1.PolicyRule{
	{APIGroups: []string{resourcev1.GroupName}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
	{APIGroups: []string{resourcev1.GroupName}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch"}},
	{APIGroups: []string{resourcev1.GroupName}, Resources: []string{"resourceclaims/" + resourcev1.SubresourceDriver},
		ResourceNames: []string{dra.DriverName},
		Verbs:         []string{resourcev1.VerbPrefixAssociatedNode + "patch"}},
	{APIGroups: []string{resourcev1.GroupName}, Resources: []string{"resourceslices"},
		Verbs: []string{"create", "update", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
}

// TestDRAIsOn: deploy/base ships the driver on, with its DeviceClass.
func TestDRAIsOn(t *testing.T) {
	b := loadBase(t)
	cfg := parseNriConf(t, b)
	require.True(t, cfg.Kubernetes.DRAOn(), "kubernetes.dra.enabled")
	dc := b.DeviceClass
	assert.Equal(t, dra.DriverName, dc.Name, "claims name the class after the driver")
	require.Len(t, dc.Spec.Selectors, 1)
	require.NotNil(t, dc.Spec.Selectors[0].CEL)
	assert.Equal(t, `device.driver == "`+dra.DriverName+`"`, dc.Spec.Selectors[0].CEL.Expression)
}

// TestDRAMountsTheKubeletsPluginDirs: the kubelet's plugin registry and
// the driver's plugin dir under nri.conf's kubeletDir are mounted from the
// host at the same paths (the kubelet dials the socket path the driver
// registers), writable.
func TestDRAMountsTheKubeletsPluginDirs(t *testing.T) {
	b := loadBase(t)
	c := b.Container(ContainerName)
	root := parseNriConf(t, b).Kubernetes.DRA.KubeletRoot()
	for _, p := range []string{filepath.Join(root, "plugins_registry"), filepath.Join(root, "plugins", dra.DriverName)} {
		m := MountFor(c, p)
		require.NotNil(t, m, "%s is on no volume mount", p)
		assert.False(t, m.ReadOnly, "%s: the driver creates its sockets there", p)
		v := b.Volume(m.Name)
		require.NotNil(t, v)
		require.NotNil(t, v.HostPath, "%s: the kubelet's directory (hostPath)", p)
		assert.Equal(t, m.MountPath, v.HostPath.Path, "%s: the same path inside and outside", p)
		assert.Equal(t, corev1.HostPathDirectoryOrCreate, *v.HostPath.Type)
	}
}

// TestDRAPoliciesNarrowTheServiceAccount: the DRA admission policies are
// bound, deny, fail closed and are evaluated for nri-cni's ServiceAccount
// only, on what its RBAC lets it write; what they allow is tested on a real
// API server (test/kubeapi).
func TestDRAPoliciesNarrowTheServiceAccount(t *testing.T) {
	b := loadBase(t)
	for _, tc := range []struct {
		policy     admissionv1.ValidatingAdmissionPolicy
		binding    admissionv1.ValidatingAdmissionPolicyBinding
		resource   string
		operations []admissionv1.OperationType
	}{
		{b.SlicePolicy, b.SlicePolicyBinding, "resourceslices",
			[]admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}},
		{b.ClaimPolicy, b.ClaimPolicyBinding, "resourceclaims/status", []admissionv1.OperationType{admissionv1.Update}},
	} {
		p := tc.policy
		require.NotNil(t, p.Spec.FailurePolicy, p.Name)
		assert.Equal(t, admissionv1.Fail, *p.Spec.FailurePolicy, p.Name)
		require.Len(t, p.Spec.MatchConditions, 1, p.Name)
		assert.Equal(t, b.Policy.Spec.MatchConditions, p.Spec.MatchConditions, "%s: nri-cni's ServiceAccount only", p.Name)
		require.NotNil(t, p.Spec.MatchConstraints, p.Name)
		rules := p.Spec.MatchConstraints.ResourceRules
		require.Len(t, rules, 1, p.Name)
		assert.Equal(t, []string{resourcev1.GroupName}, rules[0].APIGroups, p.Name)
		assert.Equal(t, []string{resourcev1.SchemeGroupVersion.Version}, rules[0].APIVersions, p.Name)
		assert.Equal(t, []string{tc.resource}, rules[0].Resources, p.Name)
		assert.Equal(t, tc.operations, rules[0].Operations, p.Name)
		var all strings.Builder
		for _, v := range p.Spec.Variables {
			all.WriteString(v.Expression + "\n")
		}
		assert.Contains(t, all.String(), "'authentication.kubernetes.io/node-name'", "%s: the token's node claim", p.Name)
		assert.Contains(t, all.String(), "'"+dra.DriverName+"'", "%s: the driver", p.Name)
		require.NotEmpty(t, p.Spec.Validations, p.Name)
		assert.Equal(t, "variables.node != ''", p.Spec.Validations[0].Expression, "%s: a token without node claim is refused", p.Name)
		for _, v := range p.Spec.Validations {
			require.NotNil(t, v.Reason, "%s: %s", p.Name, v.Expression)
			assert.Equal(t, "Forbidden", string(*v.Reason), p.Name)
		}

		pb := tc.binding
		assert.Equal(t, p.Name, pb.Name, "the binding is named after its policy")
		assert.Equal(t, p.Name, pb.Spec.PolicyName)
		assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, pb.Spec.ValidationActions)
		assert.Nil(t, pb.Spec.MatchResources, "everything the policy matches")
	}
	// The RBAC rules the policies narrow are there.
	assert.Contains(t, b.ClusterRole.Rules, draRules[1], "resourceclaims/status")
	assert.Contains(t, b.ClusterRole.Rules, draRules[3], "resourceslices")
}
