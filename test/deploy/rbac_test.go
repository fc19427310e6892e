package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/kube"
)

// nadResource is the resource name the NPWG client (kube/'s informer) asks
// for.
const nadResource = "network-attachment-definitions"

// TestRBACIsWhatKubeUses: the ClusterRole grants exactly what kube/ calls —
// NADs list/watch (and get), pods patch, core Events create/patch, the
// node's ResourceSlices list/watch (kube.NodeSlices: other DRA drivers'
// devices behind NADs), claims get (kube.APIClaims: the claims NADs name;
// also the DRA driver's), and what the DRA driver's calls need (draRules) —
// to the DaemonSet's ServiceAccount.
func TestRBACIsWhatKubeUses(t *testing.T) {
	b := loadBase(t)
	assert.Equal(t, append([]rbacv1.PolicyRule{
		{APIGroups: []string{nadv1.SchemeGroupVersion.Group}, Resources: []string{nadResource}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch"}},
	}, draRules...), b.ClusterRole.Rules)

	sa := b.ServiceAccount
	assert.Equal(t, "kube-system", sa.Namespace)
	crb := b.ClusterRoleBinding
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.ClusterRole.Name}, crb.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}, crb.Subjects)

	spec := b.DaemonSet.Spec.Template.Spec
	assert.Equal(t, sa.Name, spec.ServiceAccountName)
	assert.Equal(t, sa.Namespace, b.DaemonSet.Namespace)
	require.NotNil(t, spec.AutomountServiceAccountToken)
	assert.True(t, *spec.AutomountServiceAccountToken, "Kubernetes mode uses the in-cluster token")
	assert.Nil(t, sa.AutomountServiceAccountToken, "the pod decides")
}

func TestDaemonSetNodeNameFromTheDownwardAPI(t *testing.T) {
	b := loadBase(t)
	c := b.Container(ContainerName)
	var found *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == kube.NodeNameEnv {
			found = &c.Env[i]
		}
	}
	require.NotNil(t, found, "%s in the container's env", kube.NodeNameEnv)
	require.NotNil(t, found.ValueFrom)
	require.NotNil(t, found.ValueFrom.FieldRef)
	assert.Equal(t, "spec.nodeName", found.ValueFrom.FieldRef.FieldPath)
}

// TestCRDIsTheNPWGOne: the CRD serves what the NPWG client asks for.
func TestCRDIsTheNPWGOne(t *testing.T) {
	crd := loadBase(t).CRD
	assert.Equal(t, "apiextensions.k8s.io/v1", crd.APIVersion)
	assert.Equal(t, nadResource+"."+nadv1.SchemeGroupVersion.Group, crd.Name)
	assert.Equal(t, nadv1.SchemeGroupVersion.Group, crd.Spec.Group)
	assert.Equal(t, "Namespaced", crd.Spec.Scope)
	assert.Equal(t, CRDNames{Plural: nadResource, Singular: "network-attachment-definition",
		Kind: "NetworkAttachmentDefinition", ShortNames: []string{"nad", "net-attach-def"}}, crd.Spec.Names,
		"listKind left to the API server's default (NetworkAttachmentDefinitionList), as Multus does")
	require.Len(t, crd.Spec.Versions, 1)
	v := crd.Spec.Versions[0]
	assert.Equal(t, nadv1.SchemeGroupVersion.Version, v.Name)
	assert.True(t, v.Served)
	assert.True(t, v.Storage)
	s := v.Schema.OpenAPIV3Schema
	assert.Equal(t, "object", s.Type)
	assert.Equal(t, "object", s.Properties["metadata"].Type)
	assert.Equal(t, "object", s.Properties["spec"].Type)
	assert.Equal(t, "string", s.Properties["spec"].Properties["config"].Type, "spec.config is a string")
	assert.Empty(t, s.Properties["spec"].Required, "spec.config is optional (empty: the file of that name)")
	assert.Nil(t, s.Properties["spec"].Properties["config"].MaxLength,
		"no maxLength: kubernetes.maxNADConfigBytes bounds spec.config (the node, the NAD admission policy)")
}

// TestCRDIsMultusOne: deploy/base's CRD (and the chart's copy, checked
// equal to it by test/kubeapi's TestHelmTemplateMatchesBase) is the one
// Multus installs, in every field the API server keeps: group, names and
// short names, scope, versions and the schema with its descriptions. So
// applying one over the other changes nothing (test/kubeapi shows it on a
// real API server), and `kubectl get net-attach-def` and `kubectl get nad`
// work whichever was applied last.
func TestCRDIsMultusOne(t *testing.T) {
	multus, err := LoadMultusCRD(RepoRoot())
	require.NoError(t, err)
	ours := loadBase(t).CRD
	assert.Equal(t, multus.TypeMeta, ours.TypeMeta)
	assert.Equal(t, multus.Name, ours.Name)
	assert.Equal(t, multus.Spec.Group, ours.Spec.Group)
	assert.Equal(t, multus.Spec.Names, ours.Spec.Names, "names, short names")
	assert.Equal(t, multus.Spec.Scope, ours.Spec.Scope)
	require.Len(t, ours.Spec.Versions, len(multus.Spec.Versions))
	for i, v := range multus.Spec.Versions {
		assert.Equal(t, v.Name, ours.Spec.Versions[i].Name)
		assert.Equal(t, v.Served, ours.Spec.Versions[i].Served, v.Name)
		assert.Equal(t, v.Storage, ours.Spec.Versions[i].Storage, v.Name)
		assert.Equal(t, v.Schema, ours.Spec.Versions[i].Schema, "%s: the schema, descriptions included", v.Name)
	}
	assert.Equal(t, multus.Spec, ours.Spec, "nothing else either")
	assert.Empty(t, ours.Annotations)
}

// TestPolicyNarrowsTheServiceAccount: the policy is bound, denies, fails
// closed and is evaluated for nri-cni's ServiceAccount only; what it allows
// is tested on a real API server (test/kubeapi).
func TestPolicyNarrowsTheServiceAccount(t *testing.T) {
	b := loadBase(t)
	p := b.Policy
	require.NotNil(t, p.Spec.FailurePolicy)
	assert.Equal(t, admissionv1.Fail, *p.Spec.FailurePolicy)
	require.Len(t, p.Spec.MatchConditions, 1)
	assert.Equal(t, "request.userInfo.username == 'system:serviceaccount:"+b.ServiceAccount.Namespace+":"+
		b.ServiceAccount.Name+"'", p.Spec.MatchConditions[0].Expression)
	require.NotNil(t, p.Spec.MatchConstraints)
	rules := p.Spec.MatchConstraints.ResourceRules
	require.Len(t, rules, 1)
	assert.Equal(t, []string{""}, rules[0].APIGroups)
	assert.Equal(t, []string{"pods"}, rules[0].Resources, "pods only: the ClusterRole grants no subresource")
	assert.Equal(t, []admissionv1.OperationType{admissionv1.Update}, rules[0].Operations)
	var all strings.Builder
	for _, v := range p.Spec.Variables {
		all.WriteString(v.Expression + "\n")
	}
	for _, v := range p.Spec.Validations {
		all.WriteString(v.Expression + "\n")
	}
	assert.Contains(t, all.String(), "'authentication.kubernetes.io/node-name'", "the token's node claim")
	assert.Contains(t, all.String(), "'"+kube.AnnotationNetworkStatus+"'")
	assert.Contains(t, all.String(), "object.spec == oldObject.spec")

	pb := b.PolicyBinding
	assert.Equal(t, p.Name, pb.Spec.PolicyName)
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, pb.Spec.ValidationActions)
	assert.Nil(t, pb.Spec.MatchResources, "everything the policy matches")
}

// TestHotplugRBAC: deploy/hotplug adds exactly what hot-plug's pod informer
// needs (pods list and watch) to deploy/base's ServiceAccount, nothing else.
func TestHotplugRBAC(t *testing.T) {
	b := loadBase(t)
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy", "hotplug", "rbac.yaml"))
	require.NoError(t, err)
	docs := strings.Split(string(data), "\n---\n")
	require.Len(t, docs, 2)
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &role))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &binding))
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}}, role.Rules)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, binding.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: b.ServiceAccount.Name, Namespace: b.ServiceAccount.Namespace}},
		binding.Subjects)
	k, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy", "hotplug", "kustomization.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(k), "- rbac.yaml")
}
