package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// squash makes two CEL expressions comparable across YAML line folding.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestBase134NoMAP: deploy/base-1.34-nomap is deploy/base without its
// MutatingAdmissionPolicies — all of them, and there are exactly the two it
// replaces — plus two ValidatingAdmissionPolicies that judge the same
// objects by the same rules (the same `asks`, match conditions and
// namespaces as the required-plugins policy, on UPDATE too; the same
// selector as the claim policy) and refuse instead of mutating. The real API
// server's view: test/kubeapi TestBase134NoMAP.
func TestBase134NoMAP(t *testing.T) {
	b := loadBase(t)
	n, err := LoadNoMAP(RepoRoot())
	require.NoError(t, err)

	entries, err := os.ReadDir(n.Dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"kustomization.yaml", NoMAPRequiredFile, NoMAPClaimsFile}, names)
	k := n.Kustomization
	assert.Equal(t, []string{"../base", NoMAPRequiredFile, NoMAPClaimsFile}, k.Resources)
	assert.Empty(t, k.Namespace, "cluster-scoped policies; deploy/base's namespace for the rest")
	require.Len(t, k.Patches, 1)
	p := k.Patches[0]
	assert.Equal(t, "admissionregistration.k8s.io", p.Target.Group)
	assert.Empty(t, p.Target.Name, "every MutatingAdmissionPolicy and binding of deploy/base")
	kindRe := regexp.MustCompile("^(?:" + p.Target.Kind + ")$") // kustomize anchors selectors
	var patch map[string]any
	require.NoError(t, DecodeStrictBytes([]byte(p.Patch), &patch))
	assert.Equal(t, "delete", patch["$patch"])

	// deploy/base's mutating policies: exactly the two replaced here, each
	// dropped by the patch's target.
	var mutating []string
	for _, r := range b.Kustomization.Resources {
		data, err := os.ReadFile(filepath.Join(b.Dir, r))
		require.NoError(t, err)
		docs, err := documents(data)
		require.NoError(t, err)
		for _, doc := range docs {
			var o struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			require.NoError(t, yaml.Unmarshal(doc, &o))
			if strings.HasPrefix(o.Kind, "Mutating") {
				assert.True(t, kindRe.MatchString(o.Kind), "the patch drops %s %s", o.Kind, o.Metadata.Name)
				assert.Equal(t, "admissionregistration.k8s.io/v1", o.APIVersion)
				mutating = append(mutating, o.Kind+"/"+o.Metadata.Name)
			} else {
				assert.False(t, kindRe.MatchString(o.Kind), "the patch keeps %s", o.Kind)
			}
		}
	}
	sort.Strings(mutating)
	assert.Equal(t, []string{
		"MutatingAdmissionPolicy/" + b.ClaimNamespacePolicy.Name, "MutatingAdmissionPolicy/" + b.RequiredPolicy.Name,
		"MutatingAdmissionPolicyBinding/" + b.ClaimNamespacePolicyBinding.Name, "MutatingAdmissionPolicyBinding/" + b.RequiredPolicyBinding.Name,
	}, mutating, "a new MutatingAdmissionPolicy in deploy/base needs its validating twin here")

	for _, pol := range []struct {
		p  admissionv1.ValidatingAdmissionPolicy
		pb admissionv1.ValidatingAdmissionPolicyBinding
	}{{n.Required, n.RequiredBinding}, {n.Claims, n.ClaimsBinding}} {
		assert.Equal(t, "admissionregistration.k8s.io/v1", pol.p.APIVersion)
		assert.Equal(t, pol.p.Name, pol.pb.Spec.PolicyName)
		assert.Equal(t, pol.p.Name, pol.pb.Name)
		require.NotNil(t, pol.p.Spec.FailurePolicy)
		assert.Equal(t, admissionv1.Fail, *pol.p.Spec.FailurePolicy)
		assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, pol.pb.Spec.ValidationActions)
		require.Len(t, pol.p.Spec.Validations, 1)
		assert.NotEmpty(t, pol.p.Spec.Validations[0].MessageExpression)
	}

	// Pods: the mutating policy's pods, by its own rules, CREATE and UPDATE.
	req, mut := n.Required, b.RequiredPolicy
	assert.Equal(t, mut.Name, req.Name)
	require.Len(t, req.Spec.MatchConstraints.ResourceRules, 1)
	rule := req.Spec.MatchConstraints.ResourceRules[0]
	assert.Equal(t, []string{"pods"}, rule.Resources)
	assert.Equal(t, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}, rule.Operations)
	require.Len(t, mut.Spec.MatchConditions, len(req.Spec.MatchConditions))
	for i, c := range mut.Spec.MatchConditions {
		assert.Equal(t, c.Name, req.Spec.MatchConditions[i].Name)
		assert.Equal(t, squash(c.Expression), squash(req.Spec.MatchConditions[i].Expression))
	}
	for _, v := range []string{"asks", "podKey", "bareKey", "current", "item"} {
		assert.NotEmpty(t, Variable(req.Spec.Variables, v), v)
		assert.Equal(t, squash(Variable(mut.Spec.Variables, v)), squash(Variable(req.Spec.Variables, v)), "variable %s", v)
	}
	assert.Equal(t, b.RequiredPolicyBinding.Spec.MatchResources.NamespaceSelector, n.RequiredBinding.Spec.MatchResources.NamespaceSelector,
		"the namespaces nri.conf excludes")
	assert.Contains(t, req.Spec.Validations[0].MessageExpression, `: \'["nri-cni"]\'`, "the message gives the annotation")

	// Claims: the claim policy's selector, for the classes nri-cni ships.
	cl, cmut := n.Claims, b.ClaimNamespacePolicy
	assert.Equal(t, cmut.Name, cl.Name)
	assert.Equal(t, squash(Variable(cmut.Spec.Variables, "selector")), squash(Variable(cl.Spec.Variables, "selector")))
	assert.Contains(t, Variable(cl.Spec.Variables, "classes"), "'"+b.DeviceClass.Name+"'")
	require.Len(t, cl.Spec.MatchConstraints.ResourceRules, 1)
	assert.ElementsMatch(t, []string{"resourceclaims", "resourceclaimtemplates"}, cl.Spec.MatchConstraints.ResourceRules[0].Resources)
	assert.Equal(t, []admissionv1.OperationType{admissionv1.Create}, cl.Spec.MatchConstraints.ResourceRules[0].Operations,
		"a claim's spec is immutable")
	assert.Nil(t, n.ClaimsBinding.Spec.MatchResources, "every namespace")
	assert.Nil(t, cl.Spec.ParamKind, "always on: no parameter object whose absence would turn it off")
}
