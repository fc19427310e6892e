package kubeapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/nri-cni/nri-cni/test/deploy"
)

// TestHelmMultiNetworkPolicy: the chart's kubernetes.multiNetworkPolicy.
// Off (the default): no admission policy, no extra RBAC, nothing in
// nri.conf; the CRD is in crds/ either way (deploy/crds' file). On: nri.conf
// gets the section (every key but the chart's admissionMode), the
// ClusterRole deploy/multinetworkpolicy's read-only rules, and the admission
// policy is deploy/multinetworkpolicy's, bound as admissionMode says. Off
// without Kubernetes mode whatever the value. helm lint passes with it on.
func TestHelmMultiNetworkPolicy(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	m, err := deploy.LoadMNP(deploy.RepoRoot())
	require.NoError(t, err)
	crd, err := deploy.LoadMNPCRD(deploy.RepoRoot())
	require.NoError(t, err)
	mnpRules := m.ClusterRole.Rules

	off := h.template(ctx, t, "kube-system")
	assert.Equal(t, *crd, off.MNPCRD, "crds/ holds deploy/crds/multinetworkpolicy's CRD")
	assert.Empty(t, off.MNPPolicy.Name, "off: no MultiNetworkPolicy admission policy")
	cfg := parseConf(t, off.ConfigMap.Data[deploy.ConfigKey])
	assert.Nil(t, cfg.Kubernetes.MultiNetworkPolicy)
	for _, r := range mnpRules {
		assert.NotContains(t, off.ClusterRole.Rules, r, "off: no MultiNetworkPolicy RBAC")
	}

	on := h.template(ctx, t, "kube-system", "--set", "kubernetes.multiNetworkPolicy.enabled=true",
		"--set", "kubernetes.multiNetworkPolicy.acceptICMP=true,kubernetes.multiNetworkPolicy.propagationDelay=50ms")
	cfg = parseConf(t, on.ConfigMap.Data[deploy.ConfigKey])
	require.True(t, cfg.Kubernetes.MNPOn())
	assert.True(t, cfg.Kubernetes.MultiNetworkPolicy.AcceptICMP, "other keys reach nri.conf")
	assert.Equal(t, "50ms", cfg.Kubernetes.MultiNetworkPolicy.Delay().String())
	for _, r := range mnpRules {
		assert.Contains(t, on.ClusterRole.Rules, r)
	}
	assert.Equal(t, deploy.MNPPolicyName, on.MNPPolicy.Name)
	assert.Equal(t, m.Policy.Spec, on.MNPPolicy.Spec, "deploy/multinetworkpolicy's admission policy")
	assert.Equal(t, m.PolicyBinding.Spec, on.MNPPolicyBinding.Spec, "bound in Warn+Audit")

	deny := h.template(ctx, t, "kube-system", "--set", "kubernetes.multiNetworkPolicy.enabled=true,kubernetes.multiNetworkPolicy.admissionMode=deny",
		"--set", "fullnameOverride=netattach")
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, deny.MNPPolicyBinding.Spec.ValidationActions)
	assert.Equal(t, "netattach-multinetworkpolicy", deny.MNPPolicy.Name)
	assert.Equal(t, deny.MNPPolicy.Name, deny.MNPPolicyBinding.Spec.PolicyName)

	_, err = h.run(ctx, "template", "nri-cni", ChartDir(), "--set", "kubernetes.multiNetworkPolicy.enabled=true,kubernetes.multiNetworkPolicy.admissionMode=loud")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubernetes.multiNetworkPolicy.admissionMode \"loud\"")

	noKube := h.template(ctx, t, "kube-system", "--set", "kubernetes.enabled=false,kubernetes.multiNetworkPolicy.enabled=true")
	assert.Empty(t, noKube.MNPPolicy.Name, "no Kubernetes mode: no MultiNetworkPolicy")
	assert.Nil(t, parseConf(t, noKube.ConfigMap.Data[deploy.ConfigKey]).Kubernetes)

	out, err := h.run(ctx, "lint", "--strict", ChartDir(), "--set", "kubernetes.multiNetworkPolicy.enabled=true")
	require.NoError(t, err, "helm lint with kubernetes.multiNetworkPolicy.enabled")
	t.Logf("helm lint:\n%s", out)
}
