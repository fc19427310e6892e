package v1beta1_test

import (
	"encoding/json"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
)

// An upstream object decodes into our type and encodes back unchanged.
func TestJSONRoundTrip(t *testing.T) {
	in := `{"apiVersion":"k8s.cni.cncf.io/v1beta1","kind":"MultiNetworkPolicy","metadata":{"name":"p","namespace":"n",` +
		`"annotations":{"k8s.v1.cni.cncf.io/policy-for":"n/net1"}},"spec":{"podSelector":{"matchLabels":{"app":"s"}},` +
		`"ingress":[{"ports":[{"protocol":"TCP","port":80,"endPort":90},{"port":"http"}],"from":[{"ipBlock":{"cidr":"10.0.0.0/8",` +
		`"except":["10.1.0.0/16"]}},{"namespaceSelector":{"matchExpressions":[{"key":"k","operator":"In","values":["a"]}]}}]}],` +
		`"egress":[{}],"policyTypes":["Ingress","Egress"]}}`
	var p v1beta1.MultiNetworkPolicy
	if err := json.Unmarshal([]byte(in), &p); err != nil {
		t.Fatal(err)
	}
	if got := p.Spec.Ingress[0].Ports[0].EndPort; got == nil || *got != 90 {
		t.Errorf("endPort = %v, want 90", got)
	}
	if got := p.Spec.Ingress[0].Ports[1].Port; got == nil || got.Type != intstr.String || got.StrVal != "http" {
		t.Errorf("named port = %v", got)
	}
	out, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	_ = json.Unmarshal([]byte(in), &a)
	_ = json.Unmarshal(out, &b)
	// metadata gains creationTimestamp: null from ObjectMeta; compare the rest.
	am, bm := a.(map[string]any), b.(map[string]any)
	delete(bm["metadata"].(map[string]any), "creationTimestamp")
	ja, _ := json.Marshal(am)
	jb, _ := json.Marshal(bm)
	if string(ja) != string(jb) {
		t.Errorf("round trip changed the object:\n in %s\nout %s", ja, jb)
	}
}

func TestSchemeAndDeepCopy(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1beta1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	gvk := v1beta1.SchemeGroupVersion.WithKind(v1beta1.Kind)
	obj, err := s.New(gvk)
	if err != nil {
		t.Fatalf("scheme does not know %s: %v", gvk, err)
	}
	if _, ok := obj.(*v1beta1.MultiNetworkPolicy); !ok {
		t.Fatalf("scheme made %T", obj)
	}
	if _, err := s.New(v1beta1.SchemeGroupVersion.WithKind(v1beta1.ListKind)); err != nil {
		t.Fatal(err)
	}
	port := intstr.FromInt32(80)
	p := &v1beta1.MultiNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}}}}
	l := &v1beta1.MultiNetworkPolicyList{Items: []v1beta1.MultiNetworkPolicy{*p}}
	c := l.DeepCopyObject().(*v1beta1.MultiNetworkPolicyList)
	c.Items[0].Labels["a"] = "changed"
	c.Items[0].Spec.PodSelector.MatchLabels["x"] = "changed"
	c.Items[0].Spec.Ingress[0].Ports[0].Port.IntVal = 81
	if p.Labels["a"] != "b" || p.Spec.PodSelector.MatchLabels["x"] != "y" || port.IntVal != 80 {
		t.Error("DeepCopy shares memory with the original")
	}
	var nilP *v1beta1.MultiNetworkPolicy
	if nilP.DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}
