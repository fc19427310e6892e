package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netpol"
)

func loadMNPCRD(t *testing.T) *CRD {
	t.Helper()
	crd, err := LoadMNPCRD(RepoRoot())
	require.NoError(t, err)
	return crd
}

func loadMNP(t *testing.T) *MNP {
	t.Helper()
	m, err := LoadMNP(RepoRoot())
	require.NoError(t, err)
	return m
}

// schemaOf is the structural schema encoding/json's view of t has, as a CRD
// writes it: structs are objects with exactly their json-tagged fields (a
// field without omitempty is required), slices arrays, maps objects with
// additionalProperties, named string types strings, int32 an int32 integer
// and IntOrString int-or-string. No descriptions.
func schemaOf(t *testing.T, typ reflect.Type) Schema {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ == reflect.TypeFor[intstr.IntOrString]():
		return Schema{AnyOf: []Schema{{Type: "integer"}, {Type: "string"}}, IntOrString: true}
	case typ.Kind() == reflect.String:
		return Schema{Type: "string"}
	case typ.Kind() == reflect.Int32:
		return Schema{Type: "integer", Format: "int32"}
	case typ.Kind() == reflect.Slice:
		items := schemaOf(t, typ.Elem())
		return Schema{Type: "array", Items: &items}
	case typ.Kind() == reflect.Map:
		values := schemaOf(t, typ.Elem())
		return Schema{Type: "object", AdditionalProperties: &values}
	case typ.Kind() == reflect.Struct:
		s := Schema{Type: "object", Properties: map[string]Schema{}}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			require.NotEmpty(t, name, "%s.%s has no json name", typ, f.Name)
			s.Properties[name] = schemaOf(t, f.Type)
			if !strings.Contains(opts, "omitempty") {
				s.Required = append(s.Required, name)
			}
		}
		return s
	}
	t.Fatalf("%s: a kind (%s) no CRD here needs", typ, typ.Kind())
	return Schema{}
}

func withoutDescriptions(s Schema) Schema {
	s.Description = ""
	if s.Properties != nil {
		props := map[string]Schema{}
		for k, v := range s.Properties {
			props[k] = withoutDescriptions(v)
		}
		s.Properties = props
	}
	for _, p := range []**Schema{&s.Items, &s.AdditionalProperties} {
		if *p != nil {
			v := withoutDescriptions(**p)
			*p = &v
		}
	}
	return s
}

// TestMNPCRDSchemaIsNetworkPolicySpec: the CRD's spec is exactly
// k8s.io/api's networking/v1 NetworkPolicySpec, as encoding/json writes it
// (so our Go type, which embeds it, and upstream's objects mean the same),
// in both versions: every property and type (int-or-string port, endPort
// int32 in v1beta1 too), the four required lists, nothing stricter
// (no enum, no pattern, no limit: those would reject or prune what
// upstream's CRD keeps; the admission policy checks values instead).
func TestMNPCRDSchemaIsNetworkPolicySpec(t *testing.T) {
	crd := loadMNPCRD(t)
	spec := schemaOf(t, reflect.TypeFor[networkingv1.NetworkPolicySpec]())
	want := Schema{Type: "object", Properties: map[string]Schema{"spec": spec}}
	require.Len(t, crd.Spec.Versions, 2)
	for _, v := range crd.Spec.Versions {
		got := v.Schema.OpenAPIV3Schema
		assert.Equal(t, want, withoutDescriptions(got), "%s: the schema is NetworkPolicySpec's", v.Name)
		assert.NotEmpty(t, got.Description, "%s: our own description", v.Name)
	}
	// The walk finds the four required lists upstream has, and endPort.
	assert.Equal(t, []string{"podSelector"}, spec.Required)
	peer := spec.Properties["ingress"].Items.Properties["from"].Items
	assert.Equal(t, []string{"cidr"}, peer.Properties["ipBlock"].Required)
	for _, sel := range []Schema{spec.Properties["podSelector"], peer.Properties["podSelector"], peer.Properties["namespaceSelector"]} {
		assert.Equal(t, []string{"key", "operator"}, sel.Properties["matchExpressions"].Items.Required)
	}
	assert.Equal(t, Schema{Type: "integer", Format: "int32"},
		spec.Properties["egress"].Items.Properties["ports"].Items.Properties["endPort"])
}

// TestMNPCRDIsUpstreams: group, names, scope and versions as upstream's
// (multi-networkpolicy-nftables' CRD): v1beta1 served and stored, v1beta2
// listed, neither served nor stored, so applying one over the other changes
// no version list. The chart's crds/ holds the same file.
func TestMNPCRDIsUpstreams(t *testing.T) {
	crd := loadMNPCRD(t)
	assert.Equal(t, "apiextensions.k8s.io/v1", crd.APIVersion)
	assert.Equal(t, "multi-networkpolicies.k8s.cni.cncf.io", crd.Name)
	assert.Equal(t, "k8s.cni.cncf.io", crd.Spec.Group)
	assert.Equal(t, "Namespaced", crd.Spec.Scope)
	assert.Equal(t, CRDNames{Plural: "multi-networkpolicies", Singular: "multi-networkpolicy", Kind: "MultiNetworkPolicy",
		ShortNames: []string{"multi-policy"}}, crd.Spec.Names)
	require.Len(t, crd.Spec.Versions, 2)
	assert.Equal(t, []any{"v1beta1", true, true, "v1beta2", false, false}, []any{
		crd.Spec.Versions[0].Name, crd.Spec.Versions[0].Served, crd.Spec.Versions[0].Storage,
		crd.Spec.Versions[1].Name, crd.Spec.Versions[1].Served, crd.Spec.Versions[1].Storage})
	ours, err := os.ReadFile(filepath.Join(RepoRoot(), MNPCRDDir, MNPCRDFile))
	require.NoError(t, err)
	chart, err := os.ReadFile(filepath.Join(RepoRoot(), ChartMNPCRD))
	require.NoError(t, err)
	assert.Equal(t, string(ours), string(chart), "the chart's crds/ copy is deploy/crds/multinetworkpolicy's")
	k, err := os.ReadFile(filepath.Join(RepoRoot(), MNPCRDDir, "kustomization.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(k), "- "+MNPCRDFile)
	m := loadMNP(t)
	assert.NotContains(t, m.Kustomization.Resources, "../crds/multinetworkpolicy", "deleting the component must never delete the CRD")
}

// TestMNPRBAC: the component grants exactly what the MultiNetworkPolicy
// informers need, read only, to deploy/base's ServiceAccount.
func TestMNPRBAC(t *testing.T) {
	b, m := loadBase(t), loadMNP(t)
	assert.Equal(t, MNPPolicyName, m.ClusterRole.Name)
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"multi-networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}},
	}, m.ClusterRole.Rules)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: m.ClusterRole.Name}, m.ClusterRoleBinding.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: b.ServiceAccount.Name, Namespace: b.ServiceAccount.Namespace}},
		m.ClusterRoleBinding.Subjects)
	assert.Equal(t, []string{"rbac.yaml", "policy.yaml"}, m.Kustomization.Resources)
	assert.Equal(t, "Component", m.Kustomization.Kind)
}

// TestMNPAdmissionPolicy: bound in Warn+Audit (upstream accepts anything),
// matching MultiNetworkPolicy writes, its caps the defaults of nri.conf's
// limits, and its annotation the one the renderer reads.
func TestMNPAdmissionPolicy(t *testing.T) {
	m := loadMNP(t)
	p, pb := m.Policy, m.PolicyBinding
	assert.Equal(t, MNPPolicyName, p.Name)
	assert.Equal(t, p.Name, pb.Spec.PolicyName)
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}, pb.Spec.ValidationActions)
	require.NotNil(t, p.Spec.MatchConstraints)
	require.Len(t, p.Spec.MatchConstraints.ResourceRules, 1)
	r := p.Spec.MatchConstraints.ResourceRules[0]
	assert.Equal(t, []string{"k8s.cni.cncf.io"}, r.APIGroups)
	assert.Equal(t, []string{"multi-networkpolicies"}, r.Resources)
	assert.Equal(t, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}, r.Operations)
	l := config.DefaultMNPLimits()
	for name, want := range map[string]int{"maxRulesPerPolicy": l.MaxRulesPerPolicy, "maxPeersPerRule": l.MaxPeersPerRule,
		"maxPortsPerRule": l.MaxPortsPerRule, "maxExceptsPerIPBlock": l.MaxExceptsPerIPBlock,
		"maxSelectorTerms": l.MaxSelectorTerms, "maxValuesPerTerm": l.MaxValuesPerTerm, "maxNetworks": 32} {
		got, err := strconv.Atoi(Variable(p.Spec.Variables, name))
		require.NoError(t, err, name)
		assert.Equal(t, want, got, "variable %s is kubernetes.multiNetworkPolicy.limits' default", name)
	}
	assert.Contains(t, Variable(p.Spec.Variables, "policyFor"), "'"+netpol.PolicyForAnnotation+"'")
	ours, err := os.ReadFile(filepath.Join(RepoRoot(), MNPDir, "policy.yaml"))
	require.NoError(t, err)
	chart, err := os.ReadFile(filepath.Join(RepoRoot(), "deploy/helm/nri-cni/files/multinetworkpolicy-policy.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(ours), string(chart), "the chart's files/ copy is deploy/multinetworkpolicy's policy.yaml")
	for i, v := range p.Spec.Validations {
		assert.True(t, v.Message != "" || v.MessageExpression != "", "validation %d says what is wrong", i)
		require.NotNil(t, v.Reason, "validation %d", i)
	}
}

// TestMNPConfigPatchIsBasePlusSection: the component's nri.conf is
// deploy/base's with kubernetes.multiNetworkPolicy.enabled added and nothing
// else changed (a ConfigMap key cannot be patched in part, so the patch
// carries the whole file: this keeps it in step with deploy/base).
func TestMNPConfigPatchIsBasePlusSection(t *testing.T) {
	b, m := loadBase(t), loadMNP(t)
	require.Len(t, m.ConfigPatch, 1)
	assert.Equal(t, "replace", m.ConfigPatch[0].Op)
	assert.Equal(t, "/data/"+ConfigKey, m.ConfigPatch[0].Path)
	assert.Equal(t, b.ConfigMap.Name, m.Kustomization.Patches[0].Target.Name)
	assert.Equal(t, "ConfigMap", m.Kustomization.Patches[0].Target.Kind)
	base, patched := b.ConfigMap.Data[ConfigKey], m.ConfigPatch[0].Value
	require.True(t, strings.HasPrefix(patched, base),
		"the patch's nri.conf starts with deploy/base's, unchanged: copy deploy/base/configmap.yaml's nri.conf into %s",
		m.Kustomization.Patches[0].Path)
	for _, line := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(patched, base), "\n"), "\n") {
		assert.True(t, strings.HasPrefix(line, "  "), "only lines inside kubernetes: are added: %q", line)
	}
	want, err := config.Parse([]byte(base))
	require.NoError(t, err)
	got, err := config.Parse([]byte(patched))
	require.NoError(t, err)
	require.NotNil(t, got.Kubernetes)
	assert.True(t, got.Kubernetes.MNPOn(), "kubernetes.multiNetworkPolicy.enabled")
	assert.False(t, want.Kubernetes.MNPOn())
	got.Kubernetes.MultiNetworkPolicy = want.Kubernetes.MultiNetworkPolicy
	assert.Equal(t, want, got, "nothing else changed")
}

// TestMNPKustomize: kubectl's kustomize renders the CRD on its own, the
// component on its own (RBAC and the admission policy, as deploy/hotplug),
// and the component mixed into each base variant (nri.conf turned on there,
// nothing of the base lost, the CRD not included).
func TestMNPKustomize(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	build := func(dir string) []map[string]any {
		t.Helper()
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		require.NoError(t, err, "kubectl kustomize %s: %s", dir, out)
		var objs []map[string]any
		for _, doc := range strings.Split(string(out), "\n---\n") {
			var o map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
			objs = append(objs, o)
		}
		return objs
	}
	names := func(objs []map[string]any) []string {
		var out []string
		for _, o := range objs {
			md, _ := o["metadata"].(map[string]any)
			out = append(out, o["kind"].(string)+"/"+md["name"].(string))
		}
		return out
	}

	crds := build(filepath.Join(RepoRoot(), MNPCRDDir))
	assert.Equal(t, []string{"CustomResourceDefinition/multi-networkpolicies.k8s.cni.cncf.io"}, names(crds))

	component := names(build(filepath.Join(RepoRoot(), MNPDir)))
	assert.ElementsMatch(t, []string{"ClusterRole/" + MNPPolicyName, "ClusterRoleBinding/" + MNPPolicyName,
		"ValidatingAdmissionPolicy/" + MNPPolicyName, "ValidatingAdmissionPolicyBinding/" + MNPPolicyName}, component)

	for _, base := range []string{"deploy/base", "deploy/base-1.34", NoMAPDir} {
		t.Run(base, func(t *testing.T) {
			overlay := t.TempDir()
			rel := func(dir string) string {
				r, err := filepath.Rel(overlay, filepath.Join(RepoRoot(), dir))
				require.NoError(t, err)
				return r
			}
			require.NoError(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
				"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: ["+rel(base)+
					"]\ncomponents: ["+rel(MNPDir)+"]\n"), 0o600))
			withMNP, plain := build(overlay), build(filepath.Join(RepoRoot(), base))
			assert.ElementsMatch(t, append(names(plain), component...), names(withMNP))
			for _, o := range withMNP {
				if o["kind"] != "ConfigMap" {
					continue
				}
				data, _ := o["data"].(map[string]any)
				conf, ok := data[ConfigKey].(string)
				if !ok {
					continue
				}
				c, err := config.Parse([]byte(conf))
				require.NoError(t, err)
				assert.True(t, c.Kubernetes.MNPOn(), "%s + the component: nri.conf enables it", base)
			}
		})
	}
}
