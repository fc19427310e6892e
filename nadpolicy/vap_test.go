package nadpolicy_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
)

// decodeStrict decodes one YAML document into v, refusing unknown fields.
func decodeStrict(t *testing.T, doc string, v any) {
	t.Helper()
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
}

func render(t *testing.T, p *config.NADPolicy, max int, opts ...nadpolicy.Option) (admissionv1.ValidatingAdmissionPolicy, admissionv1.ValidatingAdmissionPolicyBinding, string) {
	t.Helper()
	out, err := nadpolicy.AdmissionPolicy(p, max, opts...)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want 2", len(docs))
	}
	var vap admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	decodeStrict(t, docs[0], &vap)
	decodeStrict(t, docs[1], &binding)
	return vap, binding, string(out)
}

func variable(vap admissionv1.ValidatingAdmissionPolicy, name string) string {
	for _, v := range vap.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}

func TestAdmissionPolicyShape(t *testing.T) {
	t.Parallel()
	vap, binding, _ := render(t, nil, 0)
	if vap.Kind != "ValidatingAdmissionPolicy" || vap.Name != nadpolicy.AdmissionPolicyName {
		t.Errorf("policy %s %s", vap.Kind, vap.Name)
	}
	if binding.Spec.PolicyName != vap.Name || !reflect.DeepEqual(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}) ||
		binding.Spec.MatchResources != nil {
		t.Errorf("binding %+v: want Warn and Audit (the default mode) for %s in every namespace", binding.Spec, vap.Name)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", vap.Spec.FailurePolicy)
	}
	rules := vap.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !reflect.DeepEqual(rules[0].APIGroups, []string{"k8s.cni.cncf.io"}) ||
		!reflect.DeepEqual(rules[0].Resources, []string{"network-attachment-definitions"}) ||
		!reflect.DeepEqual(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("resourceRules %+v", rules)
	}
	if len(vap.Spec.Validations) < 15 {
		t.Errorf("%d validations", len(vap.Spec.Validations))
	}
	for i, v := range vap.Spec.Validations {
		if v.Expression == "" || v.Message == "" || v.Reason == nil {
			t.Errorf("validation %d: %+v", i, v)
		}
		if m := v.MessageExpression; m != "" && !strings.Contains(m, "(kubernetes.") && !strings.Contains(m, "(' + variables.ruleKey + '.") {
			t.Errorf("validation %d: message %q names no key", i, v.MessageExpression)
		}
	}
	if got := variable(vap, "tooBig"); got != "size(variables.config) > 16384 || size(bytes(variables.config)) > 16384" {
		t.Errorf("tooBig = %q (the default limit)", got)
	}
	if got := variable(vap, "rule"); got != "''" {
		t.Errorf("rule = %q, want the default rule only", got)
	}
	var made config.NADPolicy
	if err := json.Unmarshal([]byte(vap.Annotations[nadpolicy.PolicyAnnotation]), &made); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&made, config.DefaultNADPolicy()) {
		t.Errorf("annotation %s = %+v, want the code default", nadpolicy.PolicyAnnotation, made)
	}
	if vap.Annotations[nadpolicy.MaxBytesAnnotation] != "16384" {
		t.Errorf("annotation %s = %q", nadpolicy.MaxBytesAnnotation, vap.Annotations[nadpolicy.MaxBytesAnnotation])
	}
}

// Namespaces get a branch where their rule differs from default; the output
// does not depend on map order.
func TestAdmissionPolicyPerNamespace(t *testing.T) {
	t.Parallel()
	def := config.DefaultNADRule()
	p := &config.NADPolicy{Default: &def, Namespaces: map[string]config.NADRule{
		"zeta":  {Types: []string{"macvlan"}, Masters: []string{"ens2f0"}},
		"alpha": {Types: config.DefaultNADTypes(), IPAMRanges: []string{"10.9.0.0/16"}},
	}}
	vap, _, first := render(t, p, 4096)
	for i := 0; i < 5; i++ {
		if _, _, again := render(t, p, 4096); again != first {
			t.Fatal("output differs between runs")
		}
	}
	for name, want := range map[string]string{
		"rule":    "request.namespace in ['alpha', 'zeta'] ? request.namespace : ''",
		"types":   "variables.rule == 'zeta' ? r'(?:macvlan)' :\nr'(?:bridge|macvlan|ipvlan|host-local|static|tuning|bandwidth|sbr|vrf)'",
		"ranges":  "variables.rule == 'alpha' ? ['10.9.0.0/16'] :\n[]",
		"masters": "variables.rule == 'zeta' ? r'(?:ens2f0)' :\nr'[^\\x00-\\x{10FFFF}]'",
		"tooBig":  "size(variables.config) > 4096 || size(bytes(variables.config)) > 4096",
	} {
		if got := variable(vap, name); got != want {
			t.Errorf("variable %s = %q\nwant %q", name, got, want)
		}
	}
}

func TestAdmissionPolicyRefusesAnInvalidPolicy(t *testing.T) {
	t.Parallel()
	_, err := nadpolicy.AdmissionPolicy(&config.NADPolicy{Namespaces: map[string]config.NADRule{"x": {IPAMRanges: []string{"bad"}}}}, 0)
	if err == nil || !strings.Contains(err.Error(), "kubernetes.nadPolicy.namespaces.x.ipamRanges[0]") {
		t.Errorf("AdmissionPolicy = %v", err)
	}
}
