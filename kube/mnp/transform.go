package mnp

// What the informers keep of a MultiNetworkPolicy and of a Namespace. Both
// are tenant input: the counts of §5 of the design are checked here, before
// anything is kept, so a policy's cost is known (and bounded) before any
// rendering. Past a count the policy is kept as netpol.Policy{Oversize:
// true}, with no spec: it isolates what it selects and allows nothing.

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/netpol"
)

// Caps of the labels kept of a remote pod or a namespace: past them the
// object is marked truncated and never matches a selector.
const (
	maxLabels     = 64
	maxLabelBytes = 4096
)

// cachedPolicy is what the MultiNetworkPolicy informer holds.
type cachedPolicy struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	policy *netpol.Policy
	// why says which cap an Oversize policy went past.
	why string
}

// DeepCopyObject implements runtime.Object; the policy is immutable and
// shared.
func (c *cachedPolicy) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// cachedNamespace is what the Namespace informer holds.
type cachedNamespace struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	ns *netpol.Namespace
}

// DeepCopyObject implements runtime.Object; ns is immutable and shared.
func (c *cachedNamespace) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// policyTransform reduces a MultiNetworkPolicy to a netpol.Policy within
// limits.
func policyTransform(l netpol.Limits) func(any) (any, error) {
	return func(obj any) (any, error) {
		p, ok := obj.(*v1beta1.MultiNetworkPolicy)
		if !ok {
			return obj, nil // a tombstone, or already reduced
		}
		np := &netpol.Policy{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Generation: p.Generation,
			PolicyFor: p.Annotations[netpol.PolicyForAnnotation]}
		c := &cachedPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			Generation: p.Generation, ResourceVersion: p.ResourceVersion}, policy: np}
		if why := netpol.Oversize(&p.Spec, l); why != "" {
			np.Oversize, c.why = true, why
			return c, nil
		}
		spec := p.Spec.DeepCopy()
		np.Spec = spec
		return c, nil
	}
}

// namespaceTransform keeps a Namespace's name and labels (capped).
func namespaceTransform(obj any) (any, error) {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	labels, truncated := capLabels(n.Labels)
	return &cachedNamespace{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		ns: &netpol.Namespace{Name: intern(n.Name), Labels: labels, Truncated: truncated}}, nil
}

// capLabels copies labels (interned) unless there are more than maxLabels
// or they hold more than maxLabelBytes: then none, and truncated.
func capLabels(in map[string]string) (map[string]string, bool) {
	if len(in) > maxLabels {
		return nil, true
	}
	size := 0
	for k, v := range in {
		size += len(k) + len(v)
	}
	if size > maxLabelBytes {
		return nil, true
	}
	return internLabels(in), false
}

// internLabels copies labels with interned keys and values (nil for none).
func internLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[intern(k)] = intern(v)
	}
	return out
}
