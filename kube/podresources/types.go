package podresources

import (
	"errors"
	"fmt"
	"slices"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Pod identifies the pod a lookup is for. Namespace and Name are what the
// kubelet answers by; UID keys the cache ("" = not cached).
type Pod struct {
	Namespace string
	Name      string
	UID       string
}

func (p Pod) String() string {
	if p.UID == "" {
		return p.Namespace + "/" + p.Name
	}
	return fmt.Sprintf("%s/%s (uid %s)", p.Namespace, p.Name, p.UID)
}

// Errors a lookup returns, wrapped with the pod and resource: test with errors.Is.
var (
	// ErrPodNotFound: the kubelet does not list the pod (not admitted on this
	// node, or already terminated).
	ErrPodNotFound = errors.New("the kubelet does not list the pod")
	// ErrNoDevices: the kubelet lists the pod but allocated it no device of
	// the resource (its containers do not request it).
	ErrNoDevices = errors.New("the kubelet allocated no device of the resource to the pod")
	// ErrAmbiguousPod: the kubelet lists two pods of that namespace and name
	// (an old one not yet gone beside its replacement); its answers carry no
	// UID to tell them apart. Transient: retry later.
	ErrAmbiguousPod = errors.New("the kubelet lists more than one pod of that namespace and name")
)

// PodResources is what the kubelet reports for one pod: per container (the
// kubelet's order: restartable init containers, then containers, each in
// spec order), the device plugin devices and the DRA claims' devices. CPU and
// memory assignments are left out. Treat it as read-only: lookups share it.
type PodResources struct {
	Namespace  string
	Name       string
	Containers []ContainerResources
}

// ContainerResources is one container's share.
type ContainerResources struct {
	Name string
	// Devices from device plugins, as the kubelet lists them: one entry per
	// device (and NUMA node) in no stable order. Use PodResources.DeviceIDs.
	Devices []ContainerDevices
	// Claims: the DRA claims the container uses and the devices allocated
	// for them.
	Claims []Claim
}

// ContainerDevices are devices of one resource.
type ContainerDevices struct {
	ResourceName string
	DeviceIDs    []string
	NUMANodes    []int64
}

// Claim is a DRA ResourceClaim a container uses, with its allocated devices.
// The kubelet does not say which of the claim's requests a device satisfies:
// match Driver/Pool/Device against the claim's status.allocation.devices.results.
type Claim struct {
	Name      string
	Namespace string
	Devices   []ClaimDevice
}

// ClaimDevice is one allocated DRA device: driver, pool and device name
// identify it; CDIDevices are its fully qualified CDI names (vendor.com/class=name).
type ClaimDevice struct {
	Driver     string
	Pool       string
	Device     string
	ShareID    string // "" unless the device is shared (consumable capacity)
	CDIDevices []string
}

// DeviceIDs returns the IDs of the devices of resourceName allocated to the
// pod, over all its containers, without duplicates, sorted ascending (see
// the package doc for why this order). nil if there are none.
func (p *PodResources) DeviceIDs(resourceName string) []string {
	var ids []string
	for _, c := range p.Containers {
		for _, d := range c.Devices {
			if d.ResourceName == resourceName {
				ids = append(ids, d.DeviceIDs...)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// ResourceNames lists the device plugin resources allocated to the pod, sorted.
func (p *PodResources) ResourceNames() []string {
	var names []string
	for _, c := range p.Containers {
		for _, d := range c.Devices {
			if len(d.DeviceIDs) > 0 {
				names = append(names, d.ResourceName)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Claims returns the pod's DRA claims over all its containers, each claim
// once (by namespace and name), in container order.
func (p *PodResources) Claims() []Claim {
	var out []Claim
	seen := map[[2]string]bool{}
	for _, c := range p.Containers {
		for _, cl := range c.Claims {
			k := [2]string{cl.Namespace, cl.Name}
			if !seen[k] {
				seen[k] = true
				out = append(out, cl)
			}
		}
	}
	return out
}

// fromAPI copies the kubelet's answer for one pod into PodResources.
func fromAPI(in *podresourcesv1.PodResources) *PodResources {
	out := &PodResources{Namespace: in.GetNamespace(), Name: in.GetName()}
	for _, c := range in.GetContainers() {
		cr := ContainerResources{Name: c.GetName()}
		for _, d := range c.GetDevices() {
			cd := ContainerDevices{ResourceName: d.GetResourceName(), DeviceIDs: slices.Clone(d.GetDeviceIds())}
			for _, n := range d.GetTopology().GetNodes() {
				cd.NUMANodes = append(cd.NUMANodes, n.GetID())
			}
			cr.Devices = append(cr.Devices, cd)
		}
		for _, dr := range c.GetDynamicResources() {
			cl := Claim{Name: dr.GetClaimName(), Namespace: dr.GetClaimNamespace()}
			for _, r := range dr.GetClaimResources() {
				cdev := ClaimDevice{Driver: r.GetDriverName(), Pool: r.GetPoolName(), Device: r.GetDeviceName(), ShareID: r.GetShareId()}
				for _, cdi := range r.GetCdiDevices() {
					cdev.CDIDevices = append(cdev.CDIDevices, cdi.GetName())
				}
				cl.Devices = append(cl.Devices, cdev)
			}
			cr.Claims = append(cr.Claims, cl)
		}
		out.Containers = append(out.Containers, cr)
	}
	return out
}
