package dra

// Publishing without a kubelet. The kubelet plugin helper publishes a
// driver's ResourceSlices through k8s.io/dynamic-resource-allocation's
// ResourceSlice controller, which it starts at the first PublishResources;
// slicePublisher starts the same controller the same way, without the
// helper's kubelet registration (Options.PublishOnly).

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// publisher is what the driver publishes through: *kubeletplugin.Helper
// or *slicePublisher.
type publisher interface {
	PublishResources(ctx context.Context, r resourceslice.DriverResources) error
	Stop()
}

// slicePublisher runs a ResourceSlice controller for the node's pool, as
// the helper's PublishResources does: started at the first publish (it
// lists and watches the node's slices of the driver and waits for that
// cache before it returns), updated at the next ones, living until ctx
// ends or Stop.
type slicePublisher struct {
	ctx     context.Context
	client  kubernetes.Interface
	node    string
	onError func(ctx context.Context, err error, msg string)

	mu   sync.Mutex // guards ctrl
	ctrl *resourceslice.Controller
}

func newSlicePublisher(ctx context.Context, client kubernetes.Interface, node string,
	onError func(ctx context.Context, err error, msg string)) *slicePublisher {
	return &slicePublisher{ctx: ctx, client: client, node: node, onError: onError}
}

// PublishResources implements publisher.
func (p *slicePublisher) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := &resourceslice.DriverResources{Pools: r.Pools}
	if p.ctrl != nil {
		p.ctrl.Update(res)
		return nil
	}
	// The Node owns the slices (they go with it); the controller looks up
	// its UID, as it does for the helper.
	ctrl, err := resourceslice.StartController(p.ctx, resourceslice.Options{
		DriverName: DriverName,
		KubeClient: p.client,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: p.node},
		Resources:  res,
		// As the helper does: every publishing error is recoverable
		// (retried by the controller), which HandleError logs.
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			p.onError(ctx, fmt.Errorf("%w: %w", kubeletplugin.ErrRecoverable, err), msg)
		},
	})
	if err != nil {
		return fmt.Errorf("starting the ResourceSlice controller of node %s: %w", p.node, err)
	}
	p.ctrl = ctrl
	return nil
}

// Stop implements publisher: the controller stops (its slices stay).
func (p *slicePublisher) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctrl != nil {
		p.ctrl.Stop()
	}
}
