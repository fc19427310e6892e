package attach

// Device-backed networks: a NetworkAttachmentDefinition annotated
// k8s.v1.cni.cncf.io/resourceName takes, for each pod, a device that
// resource's device plugin allocated to the pod. The kubelet allocates
// devices when it admits the pod, before it asks the runtime for the
// sandbox, so at RunPodSandbox the kubelet's PodResources API knows them
// (DeviceSource: no API server call). Each network of a resource takes the
// next of the pod's devices of it in a stable order (sorted IDs, as Multus
// does); a pod without (enough of) them is refused before anything is
// added, naming the network and the resource. The device goes to the chain
// as Multus hands it: runtimeConfig.deviceID (capability deviceID) and
// deviceID/pciBusID in every plugin's config; the NPWG device-info file of
// the attachment is seeded before ADD (the device plugin's file for the
// device), passed as the CNIDeviceInfoFile capability, read back into the
// record after ADD (network-status's device-info) and removed at DEL. The
// record keeps the device, so every DEL, also after nri-cni and the
// kubelet restarted, gets the device the ADD got.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/deviceinfo"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// Capability keys of device-backed networks (runtimeConfig).
const (
	CapabilityDeviceID       = "deviceID"
	CapabilityDeviceInfoFile = "CNIDeviceInfoFile"
)

// DevicePod names the pod whose devices are asked for.
type DevicePod struct{ Namespace, Name, UID string }

// DeviceSource answers which devices of a resource the kubelet allocated
// to a pod, in a stable order (kube.DeviceSource: the kubelet's
// PodResources API for device plugins' devices and, for another DRA
// driver's, the node's ResourceSlices).
type DeviceSource interface {
	Devices(ctx context.Context, pod DevicePod, resourceName string) ([]Device, error)
	// ClaimDevices are the devices allocated for request r of the pod's
	// claim r names, in allocation order.
	ClaimDevices(ctx context.Context, pod DevicePod, r cni.ClaimRequest) ([]Device, error)
}

// Device is one device allocated to the pod.
type Device struct {
	// ID is what the chain gets as deviceID.
	ID string
	// From names where it came from for logs and errors: "" for a device
	// plugin's device, else e.g. "ResourceClaim ns/name device
	// driver/pool/device".
	From string
	// Info is the device-info derived from the driver's data (nil: none),
	// used when the device plugin wrote no file for the device.
	Info *deviceinfo.DeviceInfo
}

// Assigned are the devices an attach assigned, by ID.
type Assigned map[string]Device

// DeviceInfoFiles keeps the attachments' NPWG device-info files
// (deviceinfo.Store).
type DeviceInfoFiles interface {
	SeedCNI(a deviceinfo.Attachment, resourceName, deviceID string, fallback *deviceinfo.DeviceInfo) (string, *deviceinfo.DeviceInfo, error)
	ReadCNI(a deviceinfo.Attachment) (*deviceinfo.DeviceInfo, error)
	RemoveCNI(a deviceinfo.Attachment) error
}

// ErrNoDevice: a network takes a device of a resource of which the kubelet
// allocated the pod none, or fewer than the pod's networks of it.
var ErrNoDevice = errors.New("no device allocated to the pod for the network")

type devices struct {
	src   DeviceSource    // nil: device-backed networks fail
	files DeviceInfoFiles // nil: no device-info
}

// assign gives each attachment of a device plugin resource its device:
// the k-th attachment of a resource the k-th of the pod's devices of it
// not in inUse (the devices its recorded networks hold, for a hot-plug).
// Nothing is written; an error names the network and the resource.
func (d devices) assign(ctx context.Context, sb Sandbox, atts []plan.Attachment, inUse map[string]bool) (Assigned, error) {
	var order []deviceWant
	byWant := map[deviceWant][]int{}
	for i, a := range atts {
		w := deviceWant{resource: a.Network.ResourceName, claim: a.Network.DeviceClaim}
		if w == (deviceWant{}) {
			continue
		}
		if byWant[w] == nil {
			order = append(order, w)
		}
		byWant[w] = append(byWant[w], i)
	}
	got := Assigned{}
	if len(order) == 0 {
		return got, nil // every pod start without device networks: nothing to look up
	}
	taken := maps.Clone(inUse) // also what an earlier group took: no device twice
	if taken == nil {
		taken = map[string]bool{}
	}
	pod := DevicePod{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID}
	for _, w := range order {
		idx := byWant[w]
		what := w.describe(atts[idx[0]].Name())
		if d.src == nil {
			return nil, fmt.Errorf("%s: %w: nri-cni reads no device allocations here (Kubernetes mode, kubernetes.podResourcesSocket)", what, ErrNoDevice)
		}
		devs, err := w.devices(ctx, d.src, pod)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w%s", what, ErrNoDevice, err, w.hint())
		}
		var free []Device
		for _, dev := range devs {
			if !taken[dev.ID] {
				free = append(free, dev)
			}
		}
		if len(free) < len(idx) {
			return nil, fmt.Errorf("%s: %w: the pod asks for %d network(s) of %s and the kubelet allocated it %d device(s) of it (%d held by its networks already)",
				what, ErrNoDevice, len(idx), w, len(devs), len(devs)-len(free))
		}
		for k, i := range idx {
			id := free[k].ID
			got[id], taken[id] = free[k], true
			n, err := atts[i].Network.WithDevice(id)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", atts[i].Name(), err)
			}
			// A copy: attachments of one plan may share their caps map.
			caps := maps.Clone(atts[i].Caps)
			if caps == nil {
				caps = map[string]any{}
			}
			caps[CapabilityDeviceID] = id
			atts[i].Network, atts[i].Caps, atts[i].DeviceID = n, caps, id
		}
	}
	return got, nil
}

// deviceWant is where a network takes its device from: a device plugin
// resource (or the DRA devices published with it), or a claim's request.
type deviceWant struct {
	resource string
	claim    cni.ClaimRequest
}

func (w deviceWant) String() string {
	if w.resource != "" {
		return w.resource
	}
	return "claim request " + w.claim.String()
}

func (w deviceWant) describe(network string) string {
	if w.resource != "" {
		return fmt.Sprintf("network %s takes a device of resource %q (annotation %s of its NetworkAttachmentDefinition)",
			network, w.resource, plan.AnnotationResourceName)
	}
	return fmt.Sprintf("network %s takes the device of request %q of the pod's claim %q (annotation %s of its NetworkAttachmentDefinition)",
		network, w.claim.Request, w.claim.Claim, plan.AnnotationResourceClaim)
}

func (w deviceWant) hint() string {
	if w.resource != "" {
		return fmt.Sprintf(" (request %s in a container's resources.limits, or a ResourceClaim of a device published with k8s.cni.cncf.io/resourceName %s)",
			w.resource, w.resource)
	}
	return ""
}

func (w deviceWant) devices(ctx context.Context, src DeviceSource, pod DevicePod) ([]Device, error) {
	if w.resource != "" {
		return src.Devices(ctx, pod, w.resource)
	}
	return src.ClaimDevices(ctx, pod, w.claim)
}

// inUse is the set of devices rec's networks hold.
func inUse(nets []state.Network) map[string]bool {
	held := map[string]bool{}
	for _, n := range nets {
		if n.DeviceID != "" {
			held[n.DeviceID] = true
		}
	}
	return held
}

func (devices) fileOf(sandboxID, network, ifname string) deviceinfo.Attachment {
	return deviceinfo.Attachment{Network: network, ContainerID: sandboxID, IfName: ifname}
}

// seed writes the device-info file of each attachment with a device (the
// device plugin's file of it, else what was derived from its driver's
// data, if any) and hands its path to the chain (the CNIDeviceInfoFile
// capability). On error, what it wrote is removed.
func (d devices) seed(sandboxID string, atts []plan.Attachment, got Assigned) error {
	if d.files == nil {
		return nil
	}
	for i := range atts {
		a := &atts[i]
		if a.DeviceID == "" {
			continue
		}
		path, _, err := d.files.SeedCNI(d.fileOf(sandboxID, a.Network.Name, a.IfName), a.Network.ResourceName, a.DeviceID, got[a.DeviceID].Info)
		if err != nil {
			d.unseed(sandboxID, atts[:i])
			return fmt.Errorf("network %s: device-info of device %q: %w", a.Name(), a.DeviceID, err)
		}
		a.Caps[CapabilityDeviceInfoFile] = path
	}
	return nil
}

func (d devices) unseed(sandboxID string, atts []plan.Attachment) {
	if d.files == nil {
		return
	}
	for _, a := range atts {
		if a.DeviceID != "" {
			_ = d.files.RemoveCNI(d.fileOf(sandboxID, a.Network.Name, a.IfName))
		}
	}
}

// read records the device-info of n after its ADD (the plugins may have
// written it), if there is one.
func (d devices) read(sandboxID string, n *state.Network) error {
	if d.files == nil || n.DeviceID == "" {
		return nil
	}
	info, err := d.files.ReadCNI(d.fileOf(sandboxID, n.Name, n.IfName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("device-info of device %q: %w", n.DeviceID, err)
	}
	data, err := info.Marshal()
	if err != nil {
		return err
	}
	n.DeviceInfo = data
	return nil
}

// released removes n's device-info file once its DEL is done.
func (d devices) released(sandboxID string, n state.Network) error {
	if d.files == nil || n.DeviceID == "" {
		return nil
	}
	return d.files.RemoveCNI(d.fileOf(sandboxID, n.Name, n.IfName))
}

// delCaps is the runtimeConfig a DEL of n gets when libcni cached none of
// its ADD: the ADD's capability args as recorded (a record of an nri-cni
// before they were kept: its device only).
func delCaps(n state.Network) map[string]any {
	if n.Caps != nil {
		return n.Caps
	}
	if n.DeviceID == "" {
		return nil
	}
	return map[string]any{CapabilityDeviceID: n.DeviceID}
}
