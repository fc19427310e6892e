package kube

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube/dradevice"
	"github.com/nri-cni/nri-cni/kube/podresources"
)

// DeviceSource is the kubelet's PodResources API as the engine asks it:
// which devices of a resource the kubelet allocated to a pod. First a
// device plugin's devices of the resource; else, with DRA set, the devices
// another DRA driver allocated to the pod's claims whose ResourceSlice
// attribute k8s.cni.cncf.io/resourceName is the resource (Multus ≥ 4.3.1's
// convention, what dra-driver-sriov publishes in its Multus mode), with
// the ID from k8s.cni.cncf.io/deviceID or the PCI address attributes.
// Both from the kubelet (one call, shared by the pod's networks) and the
// node's ResourceSlice informer: no API server call.
type DeviceSource struct {
	Client *podresources.Client
	// DRA resolves claimed devices over the node's ResourceSlices (nil:
	// device plugins only).
	DRA *dradevice.Resolver
	// Claims reads the claims networks name (nri-cni.io/resourceClaim);
	// nil: such networks fail.
	Claims ClaimGetter
	// Metadata reads the drivers' KEP-5304 device metadata of such a
	// claim (nil: none; the claim's status data and the slices then).
	Metadata dradevice.MetadataReader
}

// errNoneOfResource: the pod has no device of the resource, from either.
var errNoneOfResource = errors.New("no device of the resource allocated to the pod")

// Devices implements attach.DeviceSource.
func (d DeviceSource) Devices(ctx context.Context, pod attach.DevicePod, resourceName string) ([]attach.Device, error) {
	var out []attach.Device
	err := d.Client.Select(ctx, podresources.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, func(p *podresources.PodResources) error {
		out = nil
		for _, id := range p.DeviceIDs(resourceName) {
			out = append(out, attach.Device{ID: id})
		}
		if len(out) > 0 {
			return nil
		}
		claims := p.Claims()
		if d.DRA == nil || len(claims) == 0 {
			return fmt.Errorf("%w (device plugin resources: %q; DRA claims: %d)", errNoneOfResource, p.ResourceNames(), len(claims))
		}
		devs, err := d.DRA.ByResourceName(claimsAsAllocated(claims), "", resourceName)
		if err != nil {
			return err
		}
		for _, dev := range devs {
			out = append(out, attach.Device{ID: dev.DeviceID, From: dev.Where(), Info: dev.Info})
		}
		if len(out) == 0 {
			return fmt.Errorf("%w (device plugin resources: %q; no device of the pod's %d DRA claim(s) has the ResourceSlice attribute %s = %q)",
				errNoneOfResource, p.ResourceNames(), len(claims), dradevice.AttrCNIResourceName, resourceName)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("resource %q: %w", resourceName, err)
	}
	return out, nil
}

// claimsAsAllocated turns the claims the kubelet reports for the pod into
// claims as the resolver reads them: allocated devices only. The kubelet
// names no request and carries no status data, so the resolver reads the
// node's ResourceSlices (Multus's source too); the kubelet reports only the
// pod's claims, so no reservation is checked.
func claimsAsAllocated(claims []podresources.Claim) []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, 0, len(claims))
	for _, c := range claims {
		rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
		for _, dev := range c.Devices {
			res := resourceapi.DeviceRequestAllocationResult{Driver: dev.Driver, Pool: dev.Pool, Device: dev.Device}
			if dev.ShareID != "" {
				id := dev.ShareID
				res.ShareID = (*types.UID)(&id)
			}
			rc.Status.Allocation.Devices.Results = append(rc.Status.Allocation.Devices.Results, res)
		}
		out = append(out, rc)
	}
	return out
}
