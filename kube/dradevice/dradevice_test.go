package dradevice

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/deviceinfo"
)

// fakeMetadata is a MetadataReader over fixed metadata, per driver and
// base request.
type fakeMetadata map[[2]string]*metadata.DeviceMetadata

func (f fakeMetadata) DeviceMetadata(driver string, _ *resourceapi.ResourceClaim, request string) (*metadata.DeviceMetadata, error) {
	return f[[2]string{driver, request}], nil
}

type errMetadata struct{ err error }

func (e errMetadata) DeviceMetadata(string, *resourceapi.ResourceClaim, string) (*metadata.DeviceMetadata, error) {
	return nil, e.err
}

func TestResolve(t *testing.T) {
	vf := sriovVF("0000:3b:02.2", "sriov_nic_1")
	sriovSlices := StaticSlices{
		// An older generation of the pool, left until the controller
		// deletes it: not read.
		slice(sriov, "old", 1, sriovVF("0000:3b:02.2", "old_name")),
		slice(sriov, "new", 2, vf, sriovVF("0000:3b:02.3", "sriov_nic_1")),
		slice(dranet, "dranet", 1, dranetNIC(), dranetVirtual()),
	}
	pciInfo := func(addr, pf, rdma string) *deviceinfo.DeviceInfo {
		d := deviceinfo.NewPCI(addr)
		d.PCI.PFPCIAddress, d.PCI.RDMADevice = pf, rdma
		return d
	}
	netData := &resourceapi.NetworkDeviceData{InterfaceName: "net1", IPs: []string{"10.0.2.5/24"}, HardwareAddress: "aa:bb:cc:dd:ee:01"}

	for _, tc := range []struct {
		name     string
		claim    *resourceapi.ResourceClaim
		ref      Ref
		metadata MetadataReader
		slices   SliceLister
		want     []Device
	}{
		{
			name: "dra-driver-sriov, Multus mode: VfConfig in data, the ID from the slice",
			claim: claim("pod0-sriov1-x7k2p", "sriov1", []resourceapi.DeviceRequest{exact("vf", sriov)},
				[]result{{"vf", sriov, "0000-3b-02-2"}}, entry(sriov, "0000-3b-02-2", data(sriovVfConfig()))),
			ref:    Ref{Request: "vf", PodClaimName: "sriov1", PodUID: podUID},
			slices: sriovSlices,
			want: []Device{{Request: "vf", Driver: sriov, Device: "0000-3b-02-2", DeviceID: "0000:3b:02.2", Kind: KindPCI,
				Source: SourceSlice, IDKey: "k8s.cni.cncf.io/deviceID", ResourceName: "sriov_nic_1", Info: pciInfo("0000:3b:02.2", "0000:3b:00.0", "")}},
		},
		{
			name: "dra-driver-sriov, standalone after its ADD: cniConfig.deviceID in data",
			claim: claim("pod0-sriov1-x7k2p", "sriov1", []resourceapi.DeviceRequest{exact("vf", sriov)},
				[]result{{"vf", sriov, "0000-3b-02-2"}}, func() resourceapi.AllocatedDeviceStatus {
					e := entry(sriov, "0000-3b-02-2", data(sriovAfterAdd("0000:3b:02.2")))
					e.NetworkData = netData
					return e
				}()),
			ref:    Ref{Request: "vf"},
			slices: sriovSlices,
			want: []Device{{Request: "vf", Driver: sriov, Device: "0000-3b-02-2", DeviceID: "0000:3b:02.2", Kind: KindPCI,
				Source: SourceData, IDKey: "cniConfig.deviceID", ResourceName: "sriov_nic_1", Info: pciInfo("0000:3b:02.2", "0000:3b:00.0", ""),
				NetworkData: netData}},
		},
		{
			name: "data alone (no slices read): the ID and a PCI device-info",
			claim: claim("c", "p", []resourceapi.DeviceRequest{exact("nic", "fake")},
				[]result{{"nic", "fake-nic.example.com", "nic-0"}},
				entry("fake-nic.example.com", "nic-0", data(map[string]string{"interfaceName": "fk1", "pciAddress": "fffe:00:00.1"}))),
			ref: Ref{Request: "nic"},
			want: []Device{{Request: "nic", Driver: "fake-nic.example.com", Device: "nic-0", DeviceID: "fffe:00:00.1", Kind: KindPCI,
				Source: SourceData, IDKey: "pciAddress", Info: deviceinfo.NewPCI("fffe:00:00.1")}},
		},
		{
			name: "KEP-5304 metadata first, the slice for the resource name",
			claim: claim("pod0-sriov1-x7k2p", "sriov1", []resourceapi.DeviceRequest{exact("vf", sriov)},
				[]result{{"vf", sriov, "0000-3b-02-2"}}, entry(sriov, "0000-3b-02-2", data(sriovAfterAdd("0000:3b:02.7")))),
			ref: Ref{Request: "vf"},
			metadata: fakeMetadata{{sriov, "vf"}: {Requests: []metadata.DeviceMetadataRequest{{Name: "vf", Devices: []metadata.Device{{
				Driver: sriov, Pool: node, Name: "0000-3b-02-2", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"resource.kubernetes.io/pciBusID": str("0000:3b:02.2"), "pfPciAddress": str("0000:3b:00.0")},
				NetworkData: netData}}}}}},
			slices: sriovSlices,
			want: []Device{{Request: "vf", Driver: sriov, Device: "0000-3b-02-2", DeviceID: "0000:3b:02.2", Kind: KindPCI,
				Source: SourceMetadata, IDKey: "resource.kubernetes.io/pciBusID", ResourceName: "sriov_nic_1",
				Info: pciInfo("0000:3b:02.2", "0000:3b:00.0", ""), NetworkData: netData}},
		},
		{
			name:  "metadata of another device of the request: the next sources",
			claim: claim("c", "p", []resourceapi.DeviceRequest{exact("vf", sriov)}, []result{{"vf", sriov, "0000-3b-02-3"}}),
			ref:   Ref{Request: "vf"},
			metadata: fakeMetadata{{sriov, "vf"}: {Requests: []metadata.DeviceMetadataRequest{{Name: "vf", Devices: []metadata.Device{{
				Driver: sriov, Pool: node, Name: "0000-3b-02-2", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"resource.kubernetes.io/pciBusID": str("0000:3b:02.2")}}}}}}},
			slices: sriovSlices,
			want: []Device{{Request: "vf", Driver: sriov, Device: "0000-3b-02-3", DeviceID: "0000:3b:02.3", Kind: KindPCI,
				Source: SourceSlice, IDKey: "k8s.cni.cncf.io/deviceID", ResourceName: "sriov_nic_1", Info: pciInfo("0000:3b:02.3", "0000:3b:00.0", "")}},
		},
		{
			name: "dranet: no data, networkData and conditions; dra.net/pciAddress and its RDMA device",
			claim: claim("pod1-nic", "nic", []resourceapi.DeviceRequest{exact("nic", "dranet")}, []result{{"nic", dranet, "pci-0000-8a-00-0"}},
				resourceapi.AllocatedDeviceStatus{Driver: dranet, Pool: node, Device: "pci-0000-8a-00-0",
					Conditions: nil, NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: "eth2", HardwareAddress: "0c:42:a1:00:00:02"}}),
			ref:    Ref{Request: "nic"},
			slices: sriovSlices,
			want: []Device{{Request: "nic", Driver: dranet, Device: "pci-0000-8a-00-0", DeviceID: "0000:8a:00.0", Kind: KindPCI,
				Source: SourceSlice, IDKey: "dra.net/pciAddress", Info: pciInfo("0000:8a:00.0", "", "mlx5_3"),
				NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: "eth2", HardwareAddress: "0c:42:a1:00:00:02"}}},
		},
		{
			name: "firstAvailable: the request takes the chosen subrequest's devices; two devices in allocation order",
			claim: claim("c", "p", []resourceapi.DeviceRequest{firstAvailable("vf", "fast", "slow"), exact("gpu", "gpu")},
				[]result{{"vf/slow", sriov, "0000-3b-02-3"}, {"gpu", gpuDriver, "gpu-0"}, {"vf/slow", sriov, "0000-3b-02-2"}}),
			ref:    Ref{Request: "vf"},
			slices: sriovSlices,
			want: []Device{
				{Request: "vf/slow", Driver: sriov, Device: "0000-3b-02-3", DeviceID: "0000:3b:02.3", Kind: KindPCI, Source: SourceSlice,
					IDKey: "k8s.cni.cncf.io/deviceID", ResourceName: "sriov_nic_1", Info: pciInfo("0000:3b:02.3", "0000:3b:00.0", "")},
				{Request: "vf/slow", Driver: sriov, Device: "0000-3b-02-2", DeviceID: "0000:3b:02.2", Kind: KindPCI, Source: SourceSlice,
					IDKey: "k8s.cni.cncf.io/deviceID", ResourceName: "sriov_nic_1", Info: pciInfo("0000:3b:02.2", "0000:3b:00.0", "")},
			},
		},
		{
			name: "a subrequest named: exactly it",
			claim: claim("c", "p", []resourceapi.DeviceRequest{firstAvailable("vf", "fast", "slow")},
				[]result{{"vf/slow", sriov, "0000-3b-02-3"}}),
			ref:    Ref{Request: "vf/slow", Driver: sriov},
			slices: sriovSlices,
			want: []Device{{Request: "vf/slow", Driver: sriov, Device: "0000-3b-02-3", DeviceID: "0000:3b:02.3", Kind: KindPCI,
				Source: SourceSlice, IDKey: "k8s.cni.cncf.io/deviceID", ResourceName: "sriov_nic_1", Info: pciInfo("0000:3b:02.3", "0000:3b:00.0", "")}},
		},
		{
			name: "an auxiliary device (a scalable function): its name, no device-info",
			claim: claim("c", "p", []resourceapi.DeviceRequest{exact("sf", "sf")}, []result{{"sf", "sf.example.com", "sf-4"}},
				entry("sf.example.com", "sf-4", data(map[string]string{"deviceID": "mlx5_core.sf.4"}))),
			ref:  Ref{Request: "sf"},
			want: []Device{{Request: "sf", Driver: "sf.example.com", Device: "sf-4", DeviceID: "mlx5_core.sf.4", Kind: KindAuxiliary, Source: SourceData, IDKey: "deviceID"}},
		},
		{
			name:  "the driver's own attributes written without their domain",
			claim: claim("c", "p", []resourceapi.DeviceRequest{exact("nic", "x")}, []result{{"nic", "x.example.com", "d"}}),
			ref:   Ref{Request: "nic"},
			slices: StaticSlices{slice("x.example.com", "s", 0, resourceapi.Device{Name: "d",
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"pciAddress": str("0000:01:00.1"), "pfPciAddress": str("0000:01:00.0")}})},
			want: []Device{{Request: "nic", Driver: "x.example.com", Device: "d", DeviceID: "0000:01:00.1", Kind: KindPCI, Source: SourceSlice,
				IDKey: "x.example.com/pciAddress", Info: pciInfo("0000:01:00.1", "0000:01:00.0", "")}},
		},
		{
			name: "a shared device: the status entry of its share",
			claim: func() *resourceapi.ResourceClaim {
				c := claim("c", "p", []resourceapi.DeviceRequest{exact("nic", "x")}, []result{{"nic", "x.example.com", "d"}},
					resourceapi.AllocatedDeviceStatus{Driver: "x.example.com", Pool: node, Device: "d", ShareID: ptr.To("other"),
						Data: data(map[string]string{"deviceID": "0000:01:00.2"})},
					resourceapi.AllocatedDeviceStatus{Driver: "x.example.com", Pool: node, Device: "d", ShareID: ptr.To("mine"),
						Data: data(map[string]string{"deviceID": "0000:01:00.1"})})
				c.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("mine"))
				return c
			}(),
			ref: Ref{Request: "nic"},
			want: []Device{{Request: "nic", Driver: "x.example.com", Device: "d", ShareID: "mine", DeviceID: "0000:01:00.1", Kind: KindPCI,
				Source: SourceData, IDKey: "deviceID", Info: deviceinfo.NewPCI("0000:01:00.1")}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Resolver{Metadata: tc.metadata, Slices: tc.slices}
			got, err := r.Resolve(tc.claim, tc.ref)
			require.NoError(t, err)
			for i := range tc.want {
				tc.want[i].Claim = types.NamespacedName{Namespace: tc.claim.Namespace, Name: tc.claim.Name}
				tc.want[i].Pool = node
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestResolveErrors(t *testing.T) {
	sriovSlices := StaticSlices{slice(sriov, "s", 0, sriovVF("0000:3b:02.2", ""))}
	vfClaim := func(status ...resourceapi.AllocatedDeviceStatus) *resourceapi.ResourceClaim {
		return claim("pod0-sriov1-x7k2p", "sriov1", []resourceapi.DeviceRequest{exact("vf", sriov), firstAvailable("nic", "a", "b")},
			[]result{{"vf", sriov, "0000-3b-02-2"}}, status...)
	}
	for _, tc := range []struct {
		name     string
		claim    *resourceapi.ResourceClaim
		ref      Ref
		metadata MetadataReader
		slices   SliceLister
		is       error
		msg      string
	}{
		{"not allocated", claim("c", "p", []resourceapi.DeviceRequest{exact("vf", sriov)}, nil), Ref{Request: "vf"}, nil, nil,
			ErrNotAllocated, `ResourceClaim vf-test9/c request "vf": not allocated`},
		{"no such request", vfClaim(), Ref{Request: "net"}, nil, nil,
			ErrNoRequest, `request "net": no such request: the claim's requests are vf, nic`},
		{"no such subrequest", vfClaim(), Ref{Request: "nic/c"}, nil, nil,
			ErrNoRequest, `request "nic" has no subrequest "c" (its subrequests: a, b)`},
		{"a request without a device", vfClaim(), Ref{Request: "nic"}, nil, nil, ErrNoDevice, "no device allocated for the request"},
		{"another driver's devices only", vfClaim(), Ref{Request: "vf", Driver: dranet}, nil, nil, ErrNoDevice, "of driver dra.net"},
		{"not the pod's", vfClaim(), Ref{Request: "vf", PodUID: "someone-else"}, nil, nil, ErrNotReserved, "not reserved for the pod someone-else"},
		{"another pod claim", vfClaim(), Ref{Request: "vf", PodClaimName: "sriov2"}, nil, nil,
			ErrPodClaimName, `(pod claim "sriov2"): not the pod's claim of that name: the claim was made for pod claim "sriov1"`},
		{"admin access", func() *resourceapi.ResourceClaim {
			c := vfClaim()
			c.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
			return c
		}(), Ref{Request: "vf"}, nil, sriovSlices, ErrAdminAccess, "admin access"},
		{"nothing anywhere", vfClaim(entry(sriov, "0000-3b-02-2", data(sriovVfConfig()))), Ref{Request: "vf"}, fakeMetadata{},
			StaticSlices{slice(sriov, "s", 0, resourceapi.Device{Name: "0000-3b-02-2", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pcieRoot": str("pci0000:3a"), sriov + "/deviceID": str("101e")}})},
			ErrNoDeviceID, `ResourceClaim vf-test9/pod0-sriov1-x7k2p request "vf" device sriovnetwork.k8snetworkplumbingwg.io/node-1/0000-3b-02-2: ` +
				"no device ID: its driver wrote no device metadata (KEP-5304); its status.devices data has none of deviceID, pciAddress, pciBusID, " +
				"cniConfig.deviceID; its ResourceSlice attributes have none of k8s.cni.cncf.io/deviceID, resource.kubernetes.io/pciBusID, pciAddress, pciBusID"},
		{"dranet's virtual device", claim("c", "p", []resourceapi.DeviceRequest{exact("nic", "d")}, []result{{"nic", dranet, "dummy0"}}),
			Ref{Request: "nic"}, nil, StaticSlices{slice(dranet, "s", 0, dranetVirtual())}, ErrNoDeviceID,
			"no device metadata read; the claim's status.devices has no entry for it; its ResourceSlice attributes have none of"},
		{"the device not (yet) in a slice", vfClaim(), Ref{Request: "vf"}, nil, StaticSlices{},
			ErrNoSlice, "device not found in its driver's ResourceSlices (driver sriovnetwork.k8snetworkplumbingwg.io, pool node-1, 0 slices)"},
		{"no sources at all", vfClaim(), Ref{Request: "vf"}, nil, nil, ErrNoDeviceID, "no device metadata read; the claim's status.devices has no entry for it; no ResourceSlices read"},
		{"a path in data", vfClaim(entry(sriov, "0000-3b-02-2", data(map[string]string{"deviceID": "../../../dev/sda"}))), Ref{Request: "vf"}, nil, nil,
			ErrInvalidDeviceID, `status-data deviceID: invalid device ID "../../../dev/sda"`},
		{"a non-string in data", vfClaim(entry(sriov, "0000-3b-02-2", data(map[string]any{"pciAddress": 7}))), Ref{Request: "vf"}, nil, sriovSlices,
			ErrInvalidDeviceID, "status-data: data key pciAddress: invalid device ID: not a non-empty string"},
		{"a non-string attribute", vfClaim(), Ref{Request: "vf"}, nil,
			StaticSlices{slice(sriov, "s", 0, resourceapi.Device{Name: "0000-3b-02-2", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pciBusID": {IntValue: ptr.To(int64(1))}}})},
			ErrInvalidDeviceID, "resource-slice: attribute resource.kubernetes.io/pciBusID: invalid device ID"},
		{"a metadata read error", vfClaim(), Ref{Request: "vf"}, errMetadata{errors.New("permission denied")}, sriovSlices,
			nil, "device metadata (KEP-5304) of driver sriovnetwork.k8snetworkplumbingwg.io: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Resolver{Metadata: tc.metadata, Slices: tc.slices}
			_, err := r.Resolve(tc.claim, tc.ref)
			require.Error(t, err)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestIsNotFound(t *testing.T) {
	c := claim("c", "p", []resourceapi.DeviceRequest{exact("vf", sriov)}, []result{{"vf", sriov, "0000-3b-02-2"}})
	_, err := (&Resolver{Slices: StaticSlices{}}).Resolve(c, Ref{Request: "vf"})
	assert.True(t, IsNotFound(err))
	assert.ErrorIs(t, err, ErrNoDeviceID)
}

func TestKindOf(t *testing.T) {
	for id, want := range map[string]Kind{
		"0000:3b:02.2": KindPCI, "10000:01:00.0": KindPCI, "mlx5_core.sf.4": KindAuxiliary, "mlx5_core.eth.0": KindAuxiliary,
		"ice.roce.1": KindAuxiliary, "eth2": KindOther, "vendor.com-class=dev0": KindOther,
		"": "", "..": "", "a/../b": "", "/sys": "", "a b": "", "x\x00": "", "-rf": "",
	} {
		got, err := kindOf(id)
		assert.Equal(t, want, got, "%q", id)
		if want == "" {
			assert.ErrorIs(t, err, ErrInvalidDeviceID, "%q", id)
		}
	}
}

func TestByResourceName(t *testing.T) {
	slices := StaticSlices{
		slice(sriov, "s", 0, sriovVF("0000:3b:02.5", "sriov_nic_1"), sriovVF("0000:3b:02.2", "sriov_nic_1"), sriovVF("0000:5e:02.2", "sriov_nic_2")),
		slice(gpuDriver, "g", 0, resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"resource.kubernetes.io/pciBusID": str("0000:af:00.0")}}),
	}
	// The demo multus-integration-multiple-resourceclaim: two claims, a
	// GPU beside them (no resourceName: skipped, as Multus does).
	c1 := claim("pod0-sriov1-a", "sriov1", []resourceapi.DeviceRequest{exact("vf", sriov), exact("gpu", "gpu")},
		[]result{{"vf", sriov, "0000-3b-02-5"}, {"vf", sriov, "0000-3b-02-2"}, {"gpu", gpuDriver, "gpu-0"}})
	c2 := claim("pod0-sriov2-b", "sriov2", []resourceapi.DeviceRequest{exact("vf", sriov)}, []result{{"vf", sriov, "0000-5e-02-2"}})
	r := &Resolver{Slices: slices}

	got, err := r.ByResourceName([]*resourceapi.ResourceClaim{c1, c2}, podUID, "sriov_nic_1")
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, []string{"0000:3b:02.2", "0000:3b:02.5"}, []string{got[0].DeviceID, got[1].DeviceID}, "sorted by device ID, as Multus")
	assert.Equal(t, "pod0-sriov1-a", got[0].Claim.Name)

	got, err = r.ByResourceName([]*resourceapi.ResourceClaim{c1, c2}, podUID, "sriov_nic_2")
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "0000:5e:02.2", got[0].DeviceID)

	got, err = r.ByResourceName([]*resourceapi.ResourceClaim{c1, c2}, podUID, "none")
	require.NoError(t, err)
	assert.Empty(t, got)

	_, err = r.ByResourceName([]*resourceapi.ResourceClaim{c1}, "other-pod", "sriov_nic_1")
	assert.ErrorIs(t, err, ErrNotReserved)
}
