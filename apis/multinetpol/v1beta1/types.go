// Package v1beta1 is the MultiNetworkPolicy API as the Network Plumbing
// Working Group defines it: group k8s.cni.cncf.io, version v1beta1,
// resource multi-networkpolicies, a spec that is networking.k8s.io/v1's
// NetworkPolicySpec field by field. Written here (the upstream Go module is
// not available to this build); its JSON is the CRD's. Pure: no I/O.
package v1beta1

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The group, version and resource of a MultiNetworkPolicy.
const (
	GroupName = "k8s.cni.cncf.io"
	Version   = "v1beta1"
	Resource  = "multi-networkpolicies"
	Kind      = "MultiNetworkPolicy"
	ListKind  = "MultiNetworkPolicyList"
	// CRDName is the CustomResourceDefinition that serves the resource.
	CRDName = Resource + "." + GroupName
)

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// GroupVersionResource is the resource's, for discovery and clients.
var GroupVersionResource = SchemeGroupVersion.WithResource(Resource)

// MultiNetworkPolicy is a NetworkPolicy for the secondary networks its
// k8s.v1.cni.cncf.io/policy-for annotation names.
type MultiNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec networkingv1.NetworkPolicySpec `json:"spec,omitempty"`
}

// MultiNetworkPolicyList is a list of MultiNetworkPolicy.
type MultiNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []MultiNetworkPolicy `json:"items"`
}

var (
	// SchemeBuilder registers the types (and the meta/v1 options kinds).
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &MultiNetworkPolicy{}, &MultiNetworkPolicyList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// DeepCopyInto copies p into out.
func (p *MultiNetworkPolicy) DeepCopyInto(out *MultiNetworkPolicy) {
	*out = *p
	out.TypeMeta = p.TypeMeta
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	p.Spec.DeepCopyInto(&out.Spec)
}

// DeepCopy is a deep copy of p (nil for nil).
func (p *MultiNetworkPolicy) DeepCopy() *MultiNetworkPolicy {
	if p == nil {
		return nil
	}
	out := new(MultiNetworkPolicy)
	p.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (p *MultiNetworkPolicy) DeepCopyObject() runtime.Object {
	if c := p.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies l into out.
func (l *MultiNetworkPolicyList) DeepCopyInto(out *MultiNetworkPolicyList) {
	*out = *l
	out.TypeMeta = l.TypeMeta
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]MultiNetworkPolicy, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy is a deep copy of l (nil for nil).
func (l *MultiNetworkPolicyList) DeepCopy() *MultiNetworkPolicyList {
	if l == nil {
		return nil
	}
	out := new(MultiNetworkPolicyList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *MultiNetworkPolicyList) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}
