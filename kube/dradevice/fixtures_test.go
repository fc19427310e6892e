package dradevice

// Realistic objects: what dra-driver-sriov (cd9404f) and dranet (f258477)
// publish and write, as read in their code (docs/device-networks-design.md).

import (
	"encoding/json"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	node      = "node-1"
	podUID    = types.UID("pod-uid-1")
	sriov     = "sriovnetwork.k8snetworkplumbingwg.io"
	dranet    = "dra.net"
	gpuDriver = "gpu.example.com"
)

func str(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: ptr.To(s)}
}

// sriovVF is a VF as dra-driver-sriov's discovery publishes it, with the
// resourceName a DeviceAttributes policy adds in Multus mode.
func sriovVF(addr, resourceName string) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		sriov + "/vendor":                 str("15b3"),
		sriov + "/deviceID":               str("101e"), // the PCI product ID, not the device
		sriov + "/pfDeviceID":             str("101d"),
		sriov + "/pciAddress":             str(addr),
		"k8s.cni.cncf.io/deviceID":        str(addr),
		sriov + "/PFName":                 str("ens1f0"),
		sriov + "/EswitchMode":            str("legacy"),
		sriov + "/vfID":                   {IntValue: ptr.To(int64(2))},
		"resource.kubernetes.io/pcieRoot": str("pci0000:3a"),
		sriov + "/pfPciAddress":           str("0000:3b:00.0"),
		"resource.kubernetes.io/pciBusID": str(addr),
		sriov + "/linkType":               str("ether"),
		sriov + "/rdmaCapable":            {BoolValue: ptr.To(true)},
		"dra.net/numaNode":                {IntValue: ptr.To(int64(0))},
	}
	if resourceName != "" {
		attrs["k8s.cni.cncf.io/resourceName"] = str(resourceName)
	}
	return resourceapi.Device{Name: strings.NewReplacer(":", "-", ".", "-").Replace(addr), Attributes: attrs}
}

func slice(driver, name string, gen int64, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1}, Devices: devs}}
}

// dranetNIC is a PCI NIC as dranet's inventory publishes it.
func dranetNIC() resourceapi.Device {
	return resourceapi.Device{Name: "pci-0000-8a-00-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"dra.net/pciAddress":              str("0000:8a:00.0"),
		"dra.net/ifName":                  str("eth2"),
		"dra.net/mac":                     str("0c:42:a1:00:00:02"),
		"dra.net/pciVendor":               str("Mellanox Technologies"),
		"dra.net/rdma":                    {BoolValue: ptr.To(true)},
		"dra.net/rdmaDevice":              str("mlx5_3"),
		"dra.net/numaNode":                {IntValue: ptr.To(int64(1))},
		"resource.kubernetes.io/pcieRoot": str("pci0000:80"),
		"dra.net/virtual":                 {BoolValue: ptr.To(false)},
	}}
}

// dranetVirtual is a virtual interface dranet publishes (no PCI device).
func dranetVirtual() resourceapi.Device {
	return resourceapi.Device{Name: "dummy0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"dra.net/ifName": str("dummy0"), "dra.net/virtual": {BoolValue: ptr.To(true)}}}
}

type result struct{ request, driver, device string }

// claim is a template-generated claim of pod podUID (pod claim podClaim),
// requests as given, allocated results, status entries.
func claim(name, podClaim string, requests []resourceapi.DeviceRequest, results []result, status ...resourceapi.AllocatedDeviceStatus) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vf-test9", Name: name, UID: types.UID(name + "-uid"),
			Annotations: map[string]string{resourceapi.PodResourceClaimAnnotation: podClaim}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
		Status: resourceapi.ResourceClaimStatus{
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod0", UID: podUID}},
			Devices:     status,
		},
	}
	if results != nil {
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, r := range results {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: r.request, Driver: r.driver, Pool: node, Device: r.device})
		}
	}
	return c
}

func exact(name, class string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
}

func firstAvailable(name string, subs ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name}
	for _, s := range subs {
		r.FirstAvailable = append(r.FirstAvailable, resourceapi.DeviceSubRequest{Name: s, DeviceClassName: "c"})
	}
	return r
}

func data(v any) *runtime.RawExtension {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &runtime.RawExtension{Raw: raw}
}

// sriovVfConfig is what dra-driver-sriov writes to status.devices[].data
// at prepare (and, in Multus mode, all it writes).
func sriovVfConfig() map[string]any {
	return map[string]any{"apiVersion": sriov + "/v1alpha1", "kind": "VfConfig", "ifName": "net1", "netAttachDefName": "vf-test1"}
}

// sriovAfterAdd is what it writes after its own CNI ADD (standalone mode).
func sriovAfterAdd(addr string) map[string]any {
	return map[string]any{
		"vfConfig": sriovVfConfig(),
		"cniConfig": map[string]any{"cniVersion": "1.0.0", "name": "vf-test1", "type": "sriov", "vlan": 0, "deviceID": addr,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": "10.0.2.0/24"}}}}},
		"cniResult": map[string]any{"cniVersion": "1.0.0", "interfaces": []map[string]any{{"name": "net1", "mac": "aa:bb:cc:dd:ee:01", "sandbox": "/var/run/netns/x"}},
			"ips": []map[string]any{{"address": "10.0.2.5/24", "interface": 0}}},
	}
}

func entry(driver, device string, d *runtime.RawExtension) resourceapi.AllocatedDeviceStatus {
	return resourceapi.AllocatedDeviceStatus{Driver: driver, Pool: node, Device: device, Data: d}
}
