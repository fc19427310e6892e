package dradevice

// SliceLister implementations, and the Multus-compatible lookup by
// resource name.

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
)

// ListerSlices reads an informer's cache of ResourceSlices (the hot path
// never calls the API server).
type ListerSlices struct {
	Lister resourcelisters.ResourceSliceLister
}

// ResourceSlices implements SliceLister.
func (l ListerSlices) ResourceSlices(driver, pool string) ([]*resourceapi.ResourceSlice, error) {
	all, err := l.Lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return filterSlices(all, driver, pool), nil
}

// StaticSlices is a fixed set of slices (tests, one-shot tools).
type StaticSlices []*resourceapi.ResourceSlice

// ResourceSlices implements SliceLister.
func (s StaticSlices) ResourceSlices(driver, pool string) ([]*resourceapi.ResourceSlice, error) {
	return filterSlices(s, driver, pool), nil
}

func filterSlices(all []*resourceapi.ResourceSlice, driver, pool string) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, s := range all {
		if s.Spec.Driver == driver && s.Spec.Pool.Name == pool {
			out = append(out, s)
		}
	}
	return out
}

// ByResourceName is Multus's (≥ 4.3.1) way to find a NAD's device: among
// all devices allocated to the pod's claims, those whose
// k8s.cni.cncf.io/resourceName attribute equals the NAD's
// k8s.v1.cni.cncf.io/resourceName annotation, sorted by device ID (Multus
// hands the first to the first network naming the resource, the second to
// the second, …). Devices without the attribute are skipped, as Multus
// does (a GPU beside a NIC); one with it but without a usable ID is an
// error. podUID, when set, must be in each claim's reservedFor.
func (r *Resolver) ByResourceName(claims []*resourceapi.ResourceClaim, podUID types.UID, resourceName string) ([]Device, error) {
	var out []Device
	for _, c := range claims {
		where := fmt.Sprintf("ResourceClaim %s/%s", c.Namespace, c.Name)
		if c.Status.Allocation == nil {
			return nil, fmt.Errorf("%s: %w", where, ErrNotAllocated)
		}
		if podUID != "" && !slices.ContainsFunc(c.Status.ReservedFor, func(ref resourceapi.ResourceClaimConsumerReference) bool {
			return ref.APIGroup == "" && ref.Resource == "pods" && ref.UID == podUID
		}) {
			return nil, fmt.Errorf("%s: %w %s", where, ErrNotReserved, podUID)
		}
		md := metadataCache{r: r, claim: c}
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.AdminAccess != nil && *res.AdminAccess {
				continue
			}
			name, err := r.resourceNameOf(res, &md)
			if err != nil || name != resourceName {
				continue // not published for CNI, or not this resource
			}
			d, err := r.device(c, res, &md)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b Device) int { return strings.Compare(a.DeviceID, b.DeviceID) })
	return out, nil
}

// resourceNameOf reads a device's k8s.cni.cncf.io/resourceName from its
// metadata, else its slice.
func (r *Resolver) resourceNameOf(res resourceapi.DeviceRequestAllocationResult, md *metadataCache) (string, error) {
	dev, err := md.device(res)
	if err != nil {
		return "", err
	}
	if dev != nil {
		if v, ok := attrString(dev.Attributes, res.Driver, AttrCNIResourceName); ok {
			return v, nil
		}
	}
	sd, err := r.sliceDevice(res)
	if err != nil || sd == nil {
		return "", err
	}
	v, _ := attrString(sd.Attributes, res.Driver, AttrCNIResourceName)
	return v, nil
}
