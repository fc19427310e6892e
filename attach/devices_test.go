package attach_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/deviceinfo"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

const testResource = "vendor.example/res"

// deviceFixture: Kubernetes mode with two NADs of testResource (recording
// plugin declaring the deviceID and CNIDeviceInfoFile capabilities) and
// one without; the kubelet allocated the pod devs.
func deviceFixture(t *testing.T, devs ...string) (*attachtest.Fixture, deviceinfo.Store) {
	t.Helper()
	kf := attachtest.NewKube(t, nil)
	caps := map[string]any{"capabilities": map[string]any{"deviceID": true, "CNIDeviceInfoFile": true}}
	for _, name := range []string{"sriov-a", "sriov-b"} {
		n := kf.NAD(plan.NADRef{Namespace: "ns1", Name: name}, "cni-"+name, caps)
		n.ResourceName = testResource
	}
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "plain"}, "cni-plain", caps)
	store := deviceinfo.Store{Dir: t.TempDir()}
	kf.Devices = &attachtest.Devices{IDs: map[string][]string{testResource: devs}}
	kf.DeviceInfo = store
	kf.Reconfigure(func(*config.Config) {})
	return kf, store
}

func runtimeConfig(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	m := map[string]any{}
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &m))
	}
	return m
}

// Two networks of one resource take the pod's two devices in order: as
// runtimeConfig.deviceID, as deviceID/pciBusID in the plugins' config
// (what libcni ran and cached), in the record; device-info from the device
// plugin's file reaches the record and network-status; every DEL gets the
// same device, also when libcni's cache is gone and nri-cni restarted; the
// device-info files go at DEL.
func TestDevicePluginNetworksTakeTheKubeletsDevicesInOrder(t *testing.T) {
	kf, store := deviceFixture(t, "0000:3b:02.0", "0000:3b:02.1")
	require.NoError(t, store.WriteDP(testResource, "0000:3b:02.1", deviceinfo.NewPCI("0000:3b:02.1")))

	sb := attachtest.NPWGPod("sb1", `[{"name":"sriov-a"},{"name":"plain"},{"name":"sriov-b","interface":"vf1"}]`)
	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)

	calls := kf.Calls()
	require.Len(t, calls, 3)
	assert.Equal(t, []string{"ADD cni-sriov-a net1", "ADD cni-plain net2", "ADD cni-sriov-b vf1"}, kf.Cmds())
	rc0, rc2 := runtimeConfig(t, calls[0].RuntimeConfig), runtimeConfig(t, calls[2].RuntimeConfig)
	assert.Equal(t, "0000:3b:02.0", rc0["deviceID"])
	assert.Equal(t, "0000:3b:02.1", rc2["deviceID"])
	assert.Equal(t, filepath.Join(store.Dir, "cni", "cni-sriov-b-sb1_vf1"), rc2["CNIDeviceInfoFile"])
	assert.Empty(t, runtimeConfig(t, calls[1].RuntimeConfig), "a network without a resource gets no device")

	cached, _, err := kf.Engine.CNI().GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: "cni-sriov-b"},
		&libcni.RuntimeConf{ContainerID: "sb1", IfName: "vf1"})
	require.NoError(t, err)
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal(cached, &list))
	assert.Equal(t, "0000:3b:02.1", list.Plugins[0]["deviceID"], "in the plugin's config, as Multus writes it (sriov-cni)")
	assert.Equal(t, "0000:3b:02.1", list.Plugins[0]["pciBusID"], "and host-device's key")

	require.Len(t, rec.Networks, 3)
	assert.Equal(t, [3]string{"0000:3b:02.0", "", "0000:3b:02.1"}, [3]string{rec.Networks[0].DeviceID, rec.Networks[1].DeviceID, rec.Networks[2].DeviceID})
	assert.Equal(t, testResource, rec.Networks[0].Resource)
	assert.Empty(t, rec.Networks[0].DeviceInfo, "no device plugin file for the first device: none")
	assert.JSONEq(t, `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.1"}}`, string(rec.Networks[2].DeviceInfo))

	status, _ := kf.Sink.Snapshot()
	require.NotEmpty(t, status)
	last := status[len(status)-1]
	require.Len(t, last.Networks, 4)
	assert.JSONEq(t, string(rec.Networks[2].DeviceInfo), string(last.Networks[3].DeviceInfo), "network-status carries device-info")

	// nri-cni restarts with libcni's cache gone: the DEL still gets the
	// device the ADD got, from the record.
	require.NoError(t, os.RemoveAll(kf.CacheDir))
	kf.Reconfigure(func(*config.Config) {})
	require.NoError(t, kf.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), false))
	var dels []map[string]any
	for _, c := range kf.Calls()[3:] {
		require.Equal(t, "DEL", c.Cmd)
		dels = append(dels, runtimeConfig(t, c.RuntimeConfig))
	}
	require.Len(t, dels, 3)
	assert.Equal(t, "0000:3b:02.1", dels[0]["deviceID"], "reverse order: vf1 first")
	assert.Equal(t, "0000:3b:02.0", dels[2]["deviceID"])
	_, err = store.ReadCNI(deviceinfo.Attachment{Network: "cni-sriov-b", ContainerID: "sb1", IfName: "vf1"})
	assert.ErrorIs(t, err, os.ErrNotExist, "the attachment's device-info file goes at DEL")
	_, err = store.ReadDP(testResource, "0000:3b:02.1")
	assert.NoError(t, err, "the device plugin's own file stays")
}

// With libcni's cache, DEL gets what the ADD got (the cached runtimeConfig).
func TestDevicePluginDELFromTheCache(t *testing.T) {
	kf, _ := deviceFixture(t, "0000:3b:02.0")
	sb := attachtest.NPWGPod("sb1", `[{"name":"sriov-a"}]`)
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.NoError(t, kf.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), false))
	calls := kf.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, "0000:3b:02.0", runtimeConfig(t, calls[1].RuntimeConfig)["deviceID"])
}

// A pod whose networks need devices it was not allocated is refused before
// anything is added or recorded; the error names the network and the
// resource.
func TestDevicePluginNetworkWithoutTheDevice(t *testing.T) {
	for name, tc := range map[string]struct {
		devs       []string
		annotation string
		want       []string
	}{
		"no device of the resource": {annotation: `[{"name":"sriov-a"}]`,
			want: []string{"ns1/sriov-a", testResource, "k8s.v1.cni.cncf.io/resourceName", "resources.limits"}},
		"fewer devices than networks": {devs: []string{"0000:3b:02.0"}, annotation: `[{"name":"sriov-a"},{"name":"sriov-b"}]`,
			want: []string{"ns1/sriov-a", testResource, "asks for 2 network(s)", "allocated it 1 device(s)"}},
	} {
		t.Run(name, func(t *testing.T) {
			kf, store := deviceFixture(t, tc.devs...)
			_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", tc.annotation))
			require.Error(t, err)
			assert.ErrorIs(t, err, attach.ErrNoDevice)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Empty(t, kf.Calls(), "nothing added")
			_, err = kf.Store.Get("sb1")
			assert.ErrorIs(t, err, state.ErrNotFound, "nothing recorded")
			entries, _ := os.ReadDir(filepath.Join(store.Dir, "cni"))
			assert.Empty(t, entries, "no device-info file left")
		})
	}
}

// Without a device source (not Kubernetes mode's PodResources), a network
// of a resource fails clearly instead of running without its device.
func TestDevicePluginNetworkWithoutADeviceSource(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	n := kf.NAD(plan.NADRef{Namespace: "ns1", Name: "sriov-a"}, "cni-sriov-a", nil)
	n.ResourceName = testResource
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", `[{"name":"sriov-a"}]`))
	require.ErrorIs(t, err, attach.ErrNoDevice)
	assert.Contains(t, err.Error(), "podResourcesSocket")
	assert.Empty(t, kf.Calls())
}

// A DRA driver's devices (kube.DeviceSource found them through the pod's
// claims): the device-info derived from the driver's data seeds the file
// where no device plugin file exists, and reaches the record; a device
// plugin file, where the driver in Multus mode wrote one, wins.
func TestDRADevicesSeedTheirDerivedDeviceInfo(t *testing.T) {
	kf, store := deviceFixture(t, "0000:3b:02.0", "0000:3b:02.1")
	kf.Devices.Derived = func(id string) *deviceinfo.DeviceInfo {
		info := deviceinfo.NewPCI(id)
		info.PCI.RDMADevice = "mlx5_3"
		return info
	}
	require.NoError(t, store.WriteDP(testResource, "0000:3b:02.1", deviceinfo.NewPCI("0000:3b:02.1")))

	sb := attachtest.NPWGPod("sb1", `[{"name":"sriov-a"},{"name":"sriov-b"}]`)
	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.Len(t, rec.Networks, 2)
	assert.JSONEq(t, `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.0","rdma-device":"mlx5_3"}}`,
		string(rec.Networks[0].DeviceInfo), "derived from the driver's data")
	assert.JSONEq(t, `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.1"}}`,
		string(rec.Networks[1].DeviceInfo), "the device plugin file the driver wrote")
}

// Networks naming a claim request (nri-cni.io/resourceClaim) take its
// devices in the claim's allocation order, distinct from the devices a
// resourceName network of the same pod took; the log's and record's
// device is the claim's; a pod without the claim is refused before
// anything, naming the network, the claim and the annotation.
func TestClaimRequestNetworksTakeTheClaimsDevices(t *testing.T) {
	kf, _ := deviceFixture(t, "0000:3b:02.0")
	req := cni.ClaimRequest{Claim: "nics", Request: "data"}
	for _, name := range []string{"nic-a", "nic-b"} {
		n := kf.NAD(plan.NADRef{Namespace: "ns1", Name: name}, "cni-"+name,
			map[string]any{"capabilities": map[string]any{"deviceID": true}})
		n.DeviceClaim = req
	}
	devs := kf.Devices
	// The claim's second device is also the resource's (a driver in Multus
	// mode): the resource network took it first, so the claim networks
	// get the others.
	devs.IDs[attachtest.ClaimKey(req)] = []string{"0000:8a:00.2", "0000:3b:02.0", "0000:8a:00.1"}

	sb := attachtest.NPWGPod("sb1", `[{"name":"sriov-a"},{"name":"nic-a"},{"name":"nic-b"}]`)
	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	calls := kf.Calls()
	require.Len(t, calls, 3)
	var got []any
	for _, c := range calls {
		got = append(got, runtimeConfig(t, c.RuntimeConfig)["deviceID"])
	}
	assert.Equal(t, []any{"0000:3b:02.0", "0000:8a:00.2", "0000:8a:00.1"}, got)
	assert.Equal(t, "0000:8a:00.1", rec.Networks[2].DeviceID)
	assert.Empty(t, rec.Networks[2].Resource)

	sb2 := attachtest.NPWGPod("sb2", `[{"name":"nic-a"}]`)
	devs.IDs[attachtest.ClaimKey(req)] = nil
	_, err = kf.Mgr.Attach(context.Background(), sb2)
	require.ErrorIs(t, err, attach.ErrNoDevice)
	for _, w := range []string{"network ns1/nic-a", `request "data" of the pod's claim "nics"`, plan.AnnotationResourceClaim, `has no claim "nics"`} {
		assert.Contains(t, err.Error(), w)
	}
	assert.Len(t, kf.Calls(), 3, "nothing added for the refused pod")
}
