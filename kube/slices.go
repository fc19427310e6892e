package kube

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/nri-cni/nri-cni/kube/dradevice"
)

// NodeSlices starts an informer over the ResourceSlices of node (field
// selector spec.nodeName: the devices DRA drivers publish on this node)
// and returns the device resolver reading its cache: the attach path never
// calls the API server. nil (and no informer) when the API server serves
// no resource.k8s.io/v1 (no DRA: Kubernetes before 1.34). The informer runs
// until ctx ends; a pod started before its first sync finds no slice and
// is refused, and the kubelet retries it.
func NodeSlices(ctx context.Context, client kubernetes.Interface, node string) (*dradevice.Resolver, error) {
	if _, err := client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); err != nil {
		if errors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("ResourceSlices of node %s: discovering resource.k8s.io/v1: %w", node, err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	slices := factory.Resource().V1().ResourceSlices()
	lister := slices.Lister() // registers the informer before Start
	factory.Start(ctx.Done())
	return &dradevice.Resolver{Slices: dradevice.ListerSlices{Lister: lister}}, nil
}
