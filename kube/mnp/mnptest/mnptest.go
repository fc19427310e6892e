// Package mnptest has fakes of the API side of kube/mnp, for its tests and
// for the bench: a MultiNetworkPolicy client over a list and one watch, and
// discovery serving the CRD.
package mnptest

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
)

// Policies is an mnp.PolicyClient over a fixed list (Items) and one watch
// (W) the test drives.
type Policies struct {
	Mu    sync.Mutex
	Items []v1beta1.MultiNetworkPolicy
	W     *watch.FakeWatcher
}

// List implements mnp.PolicyClient.
func (f *Policies) List(context.Context, metav1.ListOptions) (*v1beta1.MultiNetworkPolicyList, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return &v1beta1.MultiNetworkPolicyList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: f.Items}, nil
}

// Watch implements mnp.PolicyClient.
func (f *Policies) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return f.W, nil
}

// IsWatchListSemanticsUnSupported: plain list+watch, as fake clientsets.
func (f *Policies) IsWatchListSemanticsUnSupported() bool { return true }

// Discovered is what discovery serves: the MultiNetworkPolicy resource when
// withCRD, else nothing.
func Discovered(withCRD bool) []*metav1.APIResourceList {
	if !withCRD {
		return nil
	}
	return []*metav1.APIResourceList{{GroupVersion: v1beta1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: v1beta1.Resource, Namespaced: true, Kind: v1beta1.Kind}}}}
}
