// Package dradevice finds the device another DRA driver allocated to a
// pod's ResourceClaim and what a CNI chain needs of it: the device ID
// (runtimeConfig.deviceID: a PCI address, an auxiliary device name) and
// its NPWG device-info (package deviceinfo). This is how a network takes
// its device from a claim of dra-driver-sriov, dranet or any driver
// (issue 30, docs/device-networks-design.md).
//
// Given a claim and a request name, Resolve returns each device allocated
// for that request (subrequests "req/sub" of a firstAvailable request
// included) and reads its ID from, in order:
//
//  1. the driver's KEP-5304 device metadata for the request, if it wrote
//     one (MetadataReader; FileMetadata reads the kubelet plugin helper's
//     file on the node);
//  2. the claim's status.devices entry of the device: its `data` (keys
//     deviceID, pciAddress, pciBusID; cniConfig.deviceID as
//     dra-driver-sriov writes it after its own CNI ADD);
//  3. the device's attributes in its ResourceSlice (SliceLister).
//
// In attributes (1 and 3) the ID is the first of DefaultIDAttributes:
// k8s.cni.cncf.io/deviceID (Multus ≥ 4.3.1's), resource.kubernetes.io/pciBusID
// (Kubernetes' standard), <driver>/pciAddress (dra-driver-sriov, dranet),
// <driver>/pciBusID. Never resource.kubernetes.io/pcieRoot (a root complex,
// not a device) nor <driver>/deviceID (dra-driver-sriov's PCI product ID).
//
// The package is pure: no API call, no file access except through the
// interfaces the caller passes (FileMetadata reads files, ListerSlices an
// informer's cache). Errors name the claim, the request and what is missing.
package dradevice

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/api/metadata"

	"github.com/nri-cni/nri-cni/deviceinfo"
)

// Errors of Resolve; each is wrapped with the claim, request and device.
var (
	ErrNotAllocated    = errors.New("not allocated")
	ErrNoRequest       = errors.New("no such request")
	ErrNoDevice        = errors.New("no device allocated for the request")
	ErrNotReserved     = errors.New("not reserved for the pod")
	ErrPodClaimName    = errors.New("not the pod's claim of that name")
	ErrAdminAccess     = errors.New("allocated with admin access (not the pod's own device)")
	ErrNoDeviceID      = errors.New("no device ID")
	ErrInvalidDeviceID = errors.New("invalid device ID")
	ErrNoSlice         = errors.New("device not found in its driver's ResourceSlices")
)

// Source says where a device ID was read.
type Source string

// Sources, in the order Resolve tries them.
const (
	SourceMetadata Source = "metadata"       // KEP-5304 device metadata
	SourceData     Source = "status-data"    // the claim's status.devices[].data
	SourceSlice    Source = "resource-slice" // the device's ResourceSlice attributes
)

// Kind is the form of a device ID.
type Kind string

// Kinds of device ID.
const (
	KindPCI       Kind = "pci"       // dddd:BB:DD.f
	KindAuxiliary Kind = "auxiliary" // <driver>.<name>.<id>, as under /sys/bus/auxiliary/devices
	KindOther     Kind = "other"     // anything else a driver names (passed through)
)

// Ref asks for the devices of one request of a claim.
type Ref struct {
	// Request is the claim's request: "req" (also every "req/<sub>" the
	// allocation chose) or "req/sub".
	Request string
	// PodClaimName, when set, is the pod's name for the claim
	// (spec.resourceClaims[].name): a claim made from a template must
	// carry it in its resource.kubernetes.io/pod-claim-name annotation.
	PodClaimName string
	// PodUID, when set, must be among the claim's status.reservedFor: a
	// pod can only use a claim reserved for it.
	PodUID types.UID
	// Driver, when set, takes only that driver's devices.
	Driver string
}

// Device is one allocated device and what the CNI chain gets of it.
type Device struct {
	Claim   types.NamespacedName
	Request string // as in the allocation result: "req" or "req/sub"
	Driver  string
	Pool    string
	Device  string
	ShareID string // of a device allocated with multiple allocations

	// DeviceID is what runtimeConfig.deviceID gets, of Kind, read from
	// Source (IDKey names the attribute or data key).
	DeviceID string
	Kind     Kind
	Source   Source
	IDKey    string
	// ResourceName is the device's k8s.cni.cncf.io/resourceName attribute
	// ("" if it has none): with DeviceID it names the device plugin
	// device-info file a driver in Multus mode writes
	// (deviceinfo.Store.ReadDP), which is preferred to Info.
	ResourceName string
	// Info is the device-info derived here: for a PCI device, its address
	// and, where the driver publishes them, its PF's address
	// (<driver>/pfPciAddress) and RDMA device (<driver>/rdmaDevice); nil
	// for other kinds (device-info v1.1.0 has no auxiliary type).
	Info *deviceinfo.DeviceInfo
	// NetworkData is the device's status.devices networkData, if any.
	NetworkData *resourceapi.NetworkDeviceData
}

// Where names the device in messages: "ResourceClaim ns/name request "r" device driver/pool/device".
func (d *Device) Where() string {
	return fmt.Sprintf("ResourceClaim %s request %q device %s/%s/%s", d.Claim, d.Request, d.Driver, d.Pool, d.Device)
}

// SliceLister gives the ResourceSlices of a driver's pool.
type SliceLister interface {
	// ResourceSlices returns the slices of driver whose pool is pool (of
	// any generation: Resolve takes the newest).
	ResourceSlices(driver, pool string) ([]*resourceapi.ResourceSlice, error)
}

// MetadataReader gives the KEP-5304 device metadata a driver wrote for a
// request of a claim.
type MetadataReader interface {
	// DeviceMetadata returns the metadata of driver for claim's request
	// (the base request name: no subrequest); nil, nil when the driver
	// wrote none for this claim.
	DeviceMetadata(driver string, claim *resourceapi.ResourceClaim, request string) (*metadata.DeviceMetadata, error)
}

// Resolver resolves claim devices. Its sources are optional: without
// Metadata the first source is skipped, without Slices the last.
type Resolver struct {
	Metadata MetadataReader
	Slices   SliceLister
	// IDAttributes overrides DefaultIDAttributes.
	IDAttributes []string
}

// Attribute names (resource.k8s.io/v1 qualified names).
const (
	// AttrCNIDeviceID and AttrCNIResourceName are Multus's (≥ 4.3.1):
	// the device ID it hands the CNI plugin, and the resource a NAD's
	// k8s.v1.cni.cncf.io/resourceName annotation names.
	AttrCNIDeviceID     = "k8s.cni.cncf.io/deviceID"
	AttrCNIResourceName = "k8s.cni.cncf.io/resourceName"
	// AttrPCIBusID is Kubernetes' standard PCI address attribute
	// (k8s.io/dynamic-resource-allocation/deviceattribute).
	AttrPCIBusID = "resource.kubernetes.io/pciBusID"
)

// DefaultIDAttributes are the attributes a device ID is read from, first
// found wins. A name without a domain is in the device's driver's domain.
var DefaultIDAttributes = []string{AttrCNIDeviceID, AttrPCIBusID, "pciAddress", "pciBusID"}

// Attributes of the driver's domain that enrich a PCI device's device-info.
const (
	attrPFPCIAddress = "pfPciAddress" // dra-driver-sriov
	attrRDMADevice   = "rdmaDevice"   // dranet
)

// Resolve returns the devices of claim allocated for ref.Request, each
// with its device ID and device-info, in allocation order.
func (r *Resolver) Resolve(claim *resourceapi.ResourceClaim, ref Ref) ([]Device, error) {
	where := fmt.Sprintf("ResourceClaim %s/%s request %q", claim.Namespace, claim.Name, ref.Request)
	if ref.PodClaimName != "" {
		where += fmt.Sprintf(" (pod claim %q)", ref.PodClaimName)
	}
	results, err := requestResults(claim, ref)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	md := metadataCache{r: r, claim: claim}
	out := make([]Device, 0, len(results))
	for _, res := range results {
		d, err := r.device(claim, res, &md)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// requestResults checks the claim against ref and returns its allocation
// results for the request.
func requestResults(claim *resourceapi.ResourceClaim, ref Ref) ([]resourceapi.DeviceRequestAllocationResult, error) {
	// A claim made from a template carries its pod claim name; one the pod
	// names directly (resourceClaimName) does not, and the caller mapped
	// the pod's name for it to the claim.
	if v, ok := claim.Annotations[resourceapi.PodResourceClaimAnnotation]; ok && ref.PodClaimName != "" && v != ref.PodClaimName {
		return nil, fmt.Errorf("%w: the claim was made for pod claim %q", ErrPodClaimName, v)
	}
	if err := checkRequest(claim, ref.Request); err != nil {
		return nil, err
	}
	alloc := claim.Status.Allocation
	if alloc == nil {
		return nil, ErrNotAllocated
	}
	if ref.PodUID != "" && !slices.ContainsFunc(claim.Status.ReservedFor, func(c resourceapi.ResourceClaimConsumerReference) bool {
		return c.APIGroup == "" && c.Resource == "pods" && c.UID == ref.PodUID
	}) {
		return nil, fmt.Errorf("%w %s", ErrNotReserved, ref.PodUID)
	}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, res := range alloc.Devices.Results {
		if !requestMatches(ref.Request, res.Request) || (ref.Driver != "" && res.Driver != ref.Driver) {
			continue
		}
		if res.AdminAccess != nil && *res.AdminAccess {
			return nil, fmt.Errorf("device %s/%s/%s: %w", res.Driver, res.Pool, res.Device, ErrAdminAccess)
		}
		out = append(out, res)
	}
	if len(out) == 0 {
		if ref.Driver != "" {
			return nil, fmt.Errorf("%w of driver %s", ErrNoDevice, ref.Driver)
		}
		return nil, ErrNoDevice
	}
	return out, nil
}

// checkRequest: the claim's spec has the request (and the subrequest).
func checkRequest(claim *resourceapi.ResourceClaim, request string) error {
	base, sub, hasSub := strings.Cut(request, "/")
	var names []string
	for _, rq := range claim.Spec.Devices.Requests {
		names = append(names, rq.Name)
		if rq.Name != base {
			continue
		}
		if !hasSub {
			return nil
		}
		var subs []string
		for _, s := range rq.FirstAvailable {
			if s.Name == sub {
				return nil
			}
			subs = append(subs, s.Name)
		}
		return fmt.Errorf("%w: request %q has no subrequest %q (its subrequests: %s)", ErrNoRequest, base, sub, list(subs))
	}
	return fmt.Errorf("%w: the claim's requests are %s", ErrNoRequest, list(names))
}

// requestMatches: a result of "req" or "req/<sub>" is the request "req"'s;
// a "req/sub" asks for exactly that subrequest.
func requestMatches(want, got string) bool {
	if want == got {
		return true
	}
	return !strings.Contains(want, "/") && strings.HasPrefix(got, want+"/")
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
