package mnp

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/netpol"
)

func rules(n int) []networkingv1.NetworkPolicyIngressRule {
	return make([]networkingv1.NetworkPolicyIngressRule, n)
}

func TestPolicyTransformCaps(t *testing.T) {
	l := netpol.DefaultLimits()
	peers := func(n int) []networkingv1.NetworkPolicyPeer { return make([]networkingv1.NetworkPolicyPeer, n) }
	ports := func(n int) []networkingv1.NetworkPolicyPort { return make([]networkingv1.NetworkPolicyPort, n) }
	terms := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprint("k", i)] = "v"
		}
		return m
	}
	values := func(n int) []string { return make([]string, n) }
	cases := []struct {
		name string
		spec networkingv1.NetworkPolicySpec
		why  string // "" = kept
	}{
		{"empty", networkingv1.NetworkPolicySpec{}, ""},
		{"rules at cap", networkingv1.NetworkPolicySpec{Ingress: rules(32), Egress: make([]networkingv1.NetworkPolicyEgressRule, 32)}, ""},
		{"rules over cap", networkingv1.NetworkPolicySpec{Ingress: rules(33), Egress: make([]networkingv1.NetworkPolicyEgressRule, 32)}, "65 ingress and egress rules (at most 64)"},
		{"peers at cap", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: peers(64)}}}, ""},
		{"peers over cap", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: peers(65)}}}, "spec.ingress[0].from: 65 peers"},
		{"egress ports over cap", networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}, {Ports: ports(65)}}}, "spec.egress[1].to.ports: 65 entries"},
		{"excepts over cap", networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{},
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: values(65)}}}}}}, "spec.egress[0].to[1].ipBlock.except: 65 entries"},
		{"excepts at cap", networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: values(64)}}}}}}, ""},
		{"selector terms over cap", networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: terms(30),
			MatchExpressions: make([]metav1.LabelSelectorRequirement, 3)}}, "spec.podSelector: 33 terms"},
		{"selector values over cap", networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpIn, Values: values(65)}}}},
			"spec.podSelector.matchExpressions[0].values: 65 values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := &v1beta1.MultiNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "p", UID: "u", Generation: 3,
				Annotations: map[string]string{netpol.PolicyForAnnotation: "n/net1", "other": strings.Repeat("x", 1000)},
				Labels:      map[string]string{"l": "v"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, Spec: c.spec}
			out, err := policyTransform(l)(in)
			if err != nil {
				t.Fatal(err)
			}
			cp := out.(*cachedPolicy)
			p := cp.policy
			if p.Namespace != "n" || p.Name != "p" || p.UID != "u" || p.Generation != 3 || p.PolicyFor != "n/net1" {
				t.Errorf("identity not kept: %+v", p)
			}
			if cp.Annotations != nil || cp.Labels != nil || cp.ManagedFields != nil {
				t.Errorf("the cache keeps metadata it does not read: %+v", cp.ObjectMeta)
			}
			if c.why == "" {
				if p.Oversize || p.Spec == nil {
					t.Fatalf("kept as Oversize (%s), want the spec", cp.why)
				}
				return
			}
			if !p.Oversize || p.Spec != nil {
				t.Fatalf("Oversize %v, spec %v: want Oversize with no spec", p.Oversize, p.Spec != nil)
			}
			if !strings.Contains(cp.why, c.why) {
				t.Errorf("why = %q, want it to contain %q", cp.why, c.why)
			}
		})
	}
}

func TestNamespaceTransformCaps(t *testing.T) {
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprint("k", i)] = "v"
	}
	cases := []struct {
		name      string
		labels    map[string]string
		truncated bool
	}{
		{"none", nil, false},
		{"few", map[string]string{"team": "a", corev1.LabelMetadataName: "n"}, false},
		{"too many", many, true},
		{"too long", map[string]string{"a": strings.Repeat("v", 4096)}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _ := namespaceTransform(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: c.labels,
				Annotations: map[string]string{"a": "b"}}, Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}}})
			cn := out.(*cachedNamespace)
			if cn.ns.Truncated != c.truncated {
				t.Errorf("Truncated = %v, want %v", cn.ns.Truncated, c.truncated)
			}
			if c.truncated && cn.ns.Labels != nil {
				t.Error("a truncated namespace keeps labels")
			}
			if !c.truncated && !mapsEqual(cn.ns.Labels, c.labels) {
				t.Errorf("labels = %v, want %v", cn.ns.Labels, c.labels)
			}
			if cn.Annotations != nil {
				t.Error("annotations kept")
			}
		})
	}
}
