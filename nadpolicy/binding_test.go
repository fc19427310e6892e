package nadpolicy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/nadpolicy"
)

// The binding's mode sets its validationActions; the policy does not
// change with it.
func TestAdmissionPolicyModes(t *testing.T) {
	t.Parallel()
	vapWarn, _, _ := render(t, nil, 0)
	for mode, want := range map[nadpolicy.Mode][]admissionv1.ValidationAction{
		"":                  {admissionv1.Warn, admissionv1.Audit},
		nadpolicy.ModeWarn:  {admissionv1.Warn, admissionv1.Audit},
		nadpolicy.ModeAudit: {admissionv1.Audit},
		nadpolicy.ModeDeny:  {admissionv1.Deny},
	} {
		vap, binding, out := render(t, nil, 0, nadpolicy.WithMode(mode))
		assert.Equal(t, want, binding.Spec.ValidationActions, "mode %q", mode)
		assert.Nil(t, binding.Spec.MatchResources, "mode %q: every namespace", mode)
		assert.Equal(t, vapWarn.Spec, vap.Spec, "mode %q: the same policy", mode)
		m := mode
		if m == "" {
			m = nadpolicy.DefaultMode
		}
		assert.Contains(t, out, "\n# Mode "+string(m)+" (nri-cni nad-policy --mode)", "mode %q: the binding says what it does", mode)
	}
	_, err := nadpolicy.AdmissionPolicy(nil, 0, nadpolicy.WithMode("Deny"))
	assert.ErrorIs(t, err, nadpolicy.ErrBadMode)
	assert.EqualError(t, err, `unknown admission mode "Deny": want one of warn, audit, deny`)
}

// Selectors in kubectl's -l syntax become the binding's matchResources,
// as the API server reads them.
func TestAdmissionPolicySelectors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sel  string
		want metav1.LabelSelector
	}{
		{"nri-cni.io/nad-admission=enforce", metav1.LabelSelector{MatchLabels: map[string]string{"nri-cni.io/nad-admission": "enforce"}}},
		{"a==true, b=1", metav1.LabelSelector{MatchLabels: map[string]string{"a": "true", "b": "1"}}},
		{"a=", metav1.LabelSelector{MatchLabels: map[string]string{"a": ""}}},
		{"kubernetes.io/metadata.name notin (multus-nets, legacy)", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"multus-nets", "legacy"}}}}},
		{"tier in (a,b),x!=y,has,!gone,z=1", metav1.LabelSelector{MatchLabels: map[string]string{"z": "1"},
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "x", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"y"}},
				{Key: "has", Operator: metav1.LabelSelectorOpExists},
				{Key: "gone", Operator: metav1.LabelSelectorOpDoesNotExist}}}},
	} {
		_, binding, _ := render(t, nil, 0, nadpolicy.WithMode(nadpolicy.ModeDeny),
			nadpolicy.WithNamespaceSelector(tc.sel), nadpolicy.WithObjectSelector(tc.sel))
		require.NotNil(t, binding.Spec.MatchResources, tc.sel)
		assert.Equal(t, &tc.want, binding.Spec.MatchResources.NamespaceSelector, tc.sel)
		assert.Equal(t, &tc.want, binding.Spec.MatchResources.ObjectSelector, tc.sel)
		assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, binding.Spec.ValidationActions)
	}

	// One selector only; blank is none.
	_, binding, _ := render(t, nil, 0, nadpolicy.WithNamespaceSelector("  "), nadpolicy.WithObjectSelector("a"))
	require.NotNil(t, binding.Spec.MatchResources)
	assert.Nil(t, binding.Spec.MatchResources.NamespaceSelector)
	assert.Equal(t, "a", binding.Spec.MatchResources.ObjectSelector.MatchExpressions[0].Key)
}

func TestAdmissionPolicyBadSelectors(t *testing.T) {
	t.Parallel()
	for sel, want := range map[string]string{
		"a in (b":                      "unbalanced parentheses",
		"a in b)":                      "unbalanced parentheses",
		"a in ()":                      "no values",
		"a,,b":                         "an empty requirement",
		"a=b,a=c":                      "given twice",
		"a/b/c=d":                      `key "a/b/c"`,
		"Example.com/a":                "the prefix must be a DNS subdomain",
		"a=b c":                        `key "a=b c"`,
		"a=" + strings.Repeat("v", 64): "value",
		"-a":                           `key "-a"`,
		"a in (b c)":                   `value "b c"`,
		"!":                            `key ""`,
	} {
		for _, opt := range []struct {
			name string
			o    nadpolicy.Option
		}{{"namespace selector", nadpolicy.WithNamespaceSelector(sel)}, {"object selector", nadpolicy.WithObjectSelector(sel)}} {
			_, err := nadpolicy.AdmissionPolicy(nil, 0, opt.o)
			require.Error(t, err, "%s %q", opt.name, sel)
			assert.True(t, errors.Is(err, nadpolicy.ErrBadSelector), "%s %q: %v", opt.name, sel, err)
			assert.Contains(t, err.Error(), opt.name+": ")
			assert.Contains(t, err.Error(), want, "%s %q", opt.name, sel)
		}
	}
}
