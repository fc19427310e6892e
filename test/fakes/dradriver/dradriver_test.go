package dradriver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/nri-cni/nri-cni/deviceinfo"
	"github.com/nri-cni/nri-cni/kube/dradevice"
)

const node = "node-1"

func newClient(objs ...any) *fake.Clientset {
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "node-uid"}})
	for _, o := range objs {
		switch o := o.(type) {
		case *resourceapi.ResourceClaim:
			_, _ = c.ResourceV1().ResourceClaims(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		}
	}
	return c
}

// shortDir is a temporary directory whose unix sockets fit the path limit.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "frd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func slices(t *testing.T, c *fake.Clientset) []resourceapi.ResourceSlice {
	l, err := c.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	return l.Items
}

// The driver registers in the kubelet's dirs and publishes N devices in
// one slice of its node's pool, each with a unique interface name and a
// fake PCI address; Stop deletes the slice and the device plugin files.
func TestPublishes(t *testing.T) {
	client, kubelet, devinfo := newClient(), shortDir(t), &deviceinfo.Store{Dir: t.TempDir()}
	d, err := Start(context.Background(), Options{NodeName: node, Client: client, KubeletDir: kubelet, Devices: 3,
		ResourceName: "example.com/fake_nic", DeviceInfo: devinfo, Logf: t.Logf})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			assert.NoError(t, d.Stop(context.Background()))
		}
	})

	assert.FileExists(t, filepath.Join(kubelet, "plugins_registry", DefaultDriverName+"-reg.sock"), "registration socket")
	assert.FileExists(t, filepath.Join(kubelet, "plugins", DefaultDriverName, "dra.sock"), "DRA socket")

	devs := d.Devices()
	require.Len(t, devs, 3)
	seen := map[string]bool{}
	for i, dev := range devs {
		assert.Equal(t, "nic-"+string(rune('0'+i)), dev.Name)
		assert.LessOrEqual(t, len(dev.Interface), 15, "an interface name")
		assert.True(t, deviceinfo.IsPCIAddress(dev.PCIAddress))
		assert.True(t, strings.HasPrefix(dev.PCIAddress, "fffe:"), "a PCI domain no machine has")
		assert.False(t, seen[dev.Interface] || seen[dev.PCIAddress])
		seen[dev.Interface], seen[dev.PCIAddress] = true, true
		info, err := devinfo.ReadDP("example.com/fake_nic", dev.PCIAddress)
		require.NoError(t, err)
		assert.Equal(t, deviceinfo.NewPCI(dev.PCIAddress), info)
	}
	other, err := newDevices(3)
	require.NoError(t, err)
	assert.NotEqual(t, devs[0].Interface, other[0].Interface, "another driver's names differ")

	require.Eventually(t, func() bool { return len(slices(t, client)) == 1 }, 30*time.Second, 20*time.Millisecond)
	s := slices(t, client)[0]
	assert.Equal(t, DefaultDriverName, s.Spec.Driver)
	assert.Equal(t, node, s.Spec.Pool.Name)
	require.Len(t, s.Spec.Devices, 3)
	a := s.Spec.Devices[1].Attributes
	str := func(k resourceapi.QualifiedName) string {
		if a[k].StringValue == nil {
			return ""
		}
		return *a[k].StringValue
	}
	assert.Equal(t, devs[1].Interface, str(DefaultDriverName+"/ifName"))
	assert.Equal(t, devs[1].PCIAddress, str(DefaultDriverName+"/pciAddress"))
	assert.Equal(t, devs[1].PCIAddress, str("resource.kubernetes.io/pciBusID"))
	assert.Equal(t, devs[1].PCIAddress, str("k8s.cni.cncf.io/deviceID"))
	assert.Equal(t, "example.com/fake_nic", str("k8s.cni.cncf.io/resourceName"))

	require.NoError(t, d.Stop(context.Background()))
	stopped = true
	assert.Empty(t, slices(t, client), "Stop deletes its slice")
	_, err = devinfo.ReadDP("example.com/fake_nic", devs[0].PCIAddress)
	assert.ErrorIs(t, err, os.ErrNotExist, "and the device plugin files")
	assert.NoError(t, d.Stop(context.Background()), "twice is fine")
}

func TestStartRefuses(t *testing.T) {
	for _, o := range []Options{
		{},
		{NodeName: node, Client: newClient(), KubeletDir: "/x", Devices: 129},
		{NodeName: node, Client: newClient(), KubeletDir: "/x", Metadata: true},
	} {
		_, err := Start(context.Background(), o)
		assert.Error(t, err)
	}
}

// allocated is a template claim of pod uid, allocated the fake's devices
// (and another driver's, whose status entry must stay).
func allocated(devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-nic-x", UID: "claim-uid",
			Annotations: map[string]string{resourceapi.PodResourceClaimAnnotation: "nic"}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: DefaultDriverName}},
			{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}}}}},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: "pod-uid"}},
			Devices:     []resourceapi.AllocatedDeviceStatus{{Driver: "gpu.example.com", Pool: node, Device: "gpu-0"}},
		},
	}
	for _, dev := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: DefaultDriverName, Pool: node, Device: dev})
	}
	c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.example.com", Pool: node, Device: "gpu-0"})
	return c
}

// What the kubelet does, over the driver's gRPC socket: NodePrepareResources
// (the helper fetches the claim, the driver writes its status entries with
// data, a CDI spec, and the helper the KEP-5304 metadata), then
// NodeUnprepareResources. The resolver finds the device from the metadata,
// from the data, and from the slice.
func TestPrepareAndResolve(t *testing.T) {
	c := allocated("nic-1")
	client, kubelet, cdi := newClient(c), shortDir(t), t.TempDir()
	d, err := Start(context.Background(), Options{NodeName: node, Client: client, KubeletDir: kubelet, Devices: 2,
		CDIDir: cdi, Metadata: true, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Stop(context.Background())) })
	dev := d.Devices()[1]

	conn, err := grpc.NewClient("unix://"+filepath.Join(kubelet, "plugins", DefaultDriverName, "dra.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	dra := drapb.NewDRAPluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
	resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{ref}})
	require.NoError(t, err)
	got := resp.Claims[string(c.UID)]
	require.NotNil(t, got)
	require.Empty(t, got.Error)
	require.Len(t, got.Devices, 1)
	assert.Equal(t, "nic-1", got.Devices[0].DeviceName)
	assert.Contains(t, got.Devices[0].CdiDeviceIds, DefaultDriverName+"/nic=claim-uid-nic-1", "the driver's CDI device")
	assert.Len(t, got.Devices[0].CdiDeviceIds, 2, "and the helper's metadata mount")
	assert.Equal(t, map[types.UID][]string{"claim-uid": {"nic-1"}}, d.Prepared())

	var spec map[string]any
	data, err := os.ReadFile(filepath.Join(cdi, DefaultDriverName+"-claim-uid.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &spec))
	assert.Equal(t, DefaultDriverName+"/nic", spec["kind"])

	// The claim's status: its entry with data, the GPU driver's kept.
	cur, err := client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, cur.Status.Devices, 2)
	assert.Equal(t, "gpu.example.com", cur.Status.Devices[0].Driver)
	assert.JSONEq(t, `{"interfaceName":"`+dev.Interface+`","pciAddress":"`+dev.PCIAddress+`"}`, string(cur.Status.Devices[1].Data.Raw))

	// The resolver, from each source.
	require.Eventually(t, func() bool { return len(slices(t, client)) == 1 }, 30*time.Second, 20*time.Millisecond)
	var sl dradevice.StaticSlices
	for _, s := range slices(t, client) {
		sl = append(sl, s.DeepCopy())
	}
	ref2 := dradevice.Ref{Request: "nic", PodClaimName: "nic", PodUID: "pod-uid", Driver: DefaultDriverName}
	for _, tc := range []struct {
		r    *dradevice.Resolver
		want dradevice.Source
	}{
		{&dradevice.Resolver{Metadata: dradevice.FileMetadata{KubeletDir: kubelet}, Slices: sl}, dradevice.SourceMetadata},
		{&dradevice.Resolver{Slices: sl}, dradevice.SourceData},
	} {
		devs, err := tc.r.Resolve(cur, ref2)
		require.NoError(t, err)
		require.Len(t, devs, 1)
		assert.Equal(t, tc.want, devs[0].Source)
		assert.Equal(t, dev.PCIAddress, devs[0].DeviceID)
		assert.Equal(t, deviceinfo.NewPCI(dev.PCIAddress), devs[0].Info)
	}
	bare := cur.DeepCopy()
	bare.Status.Devices = nil
	devs, err := (&dradevice.Resolver{Slices: sl}).Resolve(bare, ref2)
	require.NoError(t, err)
	assert.Equal(t, dradevice.SourceSlice, devs[0].Source)
	assert.Equal(t, dev.PCIAddress, devs[0].DeviceID)

	// Unprepare: its status entry and CDI spec go.
	uresp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{ref}})
	require.NoError(t, err)
	assert.Empty(t, uresp.Claims[string(c.UID)].Error)
	cur, err = client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, cur.Status.Devices, 1)
	assert.Equal(t, "gpu.example.com", cur.Status.Devices[0].Driver)
	assert.NoFileExists(t, filepath.Join(cdi, DefaultDriverName+"-claim-uid.json"))
	assert.Empty(t, d.Prepared())
}

func TestPrepareRefuses(t *testing.T) {
	d := &Driver{o: Options{DriverName: DefaultDriverName, NodeName: node, Client: newClient(), Logf: t.Logf}, prepared: map[types.UID]*prepared{}}
	var err error
	d.devices, err = newDevices(1)
	require.NoError(t, err)
	notAllocated := allocated()
	notAllocated.Status.Allocation = nil
	otherPool := allocated("nic-0")
	otherPool.Status.Allocation.Devices.Results[0].Pool = "node-2"
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{notAllocated, allocated("nic-7")})
	require.NoError(t, err)
	assert.ErrorContains(t, res["claim-uid"].Err, "is not one of this driver's on node node-1")
	res, err = d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{notAllocated})
	require.NoError(t, err)
	assert.ErrorContains(t, res["claim-uid"].Err, "not allocated")
	res, err = d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{otherPool})
	require.NoError(t, err)
	assert.Error(t, res["claim-uid"].Err)
	assert.Empty(t, d.Prepared())
}

// With Links, each device is an interface on the host, gone at Stop.
func TestLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates dummy interfaces)")
	}
	d, err := Start(context.Background(), Options{NodeName: node, Client: newClient(), KubeletDir: shortDir(t), Devices: 2, Links: true, Logf: t.Logf})
	require.NoError(t, err)
	for _, dev := range d.Devices() {
		l, err := netlink.LinkByName(dev.Interface)
		require.NoError(t, err, dev.Interface)
		assert.Contains(t, []string{"dummy", "veth"}, l.Type(), "a dummy (or, without the dummy driver, a veth)")
	}
	require.NoError(t, d.Stop(context.Background()))
	for _, dev := range d.Devices() {
		for _, name := range []string{dev.Interface, dev.Interface + "p"} {
			_, err := netlink.LinkByName(name)
			assert.Error(t, err, "%s removed", name)
		}
	}
}
