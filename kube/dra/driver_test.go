package dra

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

type released struct{ ns, name, uid []string }

func (r *released) ClaimReleased(ns, name, uid string) {
	r.ns, r.name, r.uid = append(r.ns, ns), append(r.name, name), append(r.uid, uid)
}

func newDriver(t *testing.T, sharing string) (*Driver, *state.Claims, *released) {
	t.Helper()
	alpha := net(t, "alpha", `{"type":"bridge","capabilities":{"mac":true},"ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`)
	cfg := config.Default()
	cfg.PodCapabilities = []string{"mac"}
	cfg.Kubernetes = &config.KubernetesConfig{DRA: &config.DRAConfig{Enabled: true, Sharing: sharing}}
	cfg.Namespaces.Exclude = []string{"kube-system"}
	planner := plan.New(cfg, plan.Catalogue{Local: func() []*cni.Network { return []*cni.Network{alpha} }, NADs: noNADs{}})
	claims, err := state.OpenClaims(t.TempDir())
	require.NoError(t, err)
	l := logrus.New()
	l.SetOutput(io.Discard)
	rel := &released{}
	d := New(Options{NodeName: "node-1", Config: cfg.Kubernetes.DRA, Claims: claims, Planner: planner, Sink: rel,
		Candidates: func() []Candidate { return []Candidate{{Network: "alpha", Net: alpha, Local: true}} },
		Limits:     cfg.Limits, Log: logrus.NewEntry(l)})
	require.True(t, d.refresh())
	require.False(t, d.refresh(), "unchanged")
	return d, claims, rel
}

type noNADs struct{}

func (noNADs) Network(ref plan.NADRef) (*cni.Network, error) { return nil, plan.ErrNoSuchNAD }

// claim is a template-made claim of pod-uid, allocated one device per
// request, with configs.
func claim(ns, name string, devices map[string]string, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod", UID: "pod-uid", Controller: ptr.To(true)}}},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Config: configs}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod", UID: "pod-uid"}},
		},
	}
	for req, dev := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: req, Driver: DriverName, Pool: "node-1", Device: dev})
	}
	return c
}

func opaque(source resourceapi.AllocationConfigSource, body string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: source, Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: DriverName, Parameters: runtime.RawExtension{
			Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig",` + body + `}`)}}}}
}

func TestPrepareRecordsAndUnprepareForgets(t *testing.T) {
	d, claims, rel := newDriver(t, config.SharingMultiple)
	dev := DeviceName("alpha")
	c := claim("team", "net", map[string]string{"a": dev},
		opaque(resourceapi.AllocationConfigSourceClaim, `"interface":"data0","mac":"02:00:00:00:00:01"`),
		opaque(resourceapi.AllocationConfigSourceClass, `"mac":"02:00:00:00:00:02"`),
		opaque(resourceapi.AllocationConfigSourceClaim, `"interface":"other"`, "not-a"))
	c.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("share-1"))
	out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, out[c.UID].Err)
	assert.Equal(t, []kubeletplugin.Device{{Requests: []string{"a"}, PoolName: "node-1", DeviceName: dev,
		ShareID: ptr.To(types.UID("share-1"))}}, out[c.UID].Devices)

	devs := claims.ForPod("pod-uid")
	require.Len(t, devs, 1)
	assert.Equal(t, state.ClaimRef{Namespace: "team", Name: "net", UID: "uid-net", Request: "a", Driver: DriverName,
		Pool: "node-1", Device: dev, ShareID: "share-1"}, devs[0].Ref)
	assert.Equal(t, "alpha", devs[0].Network)
	require.Len(t, devs[0].Configs, 2, "the config for another request is left out")
	assert.True(t, devs[0].Configs[1].FromClass)

	// Prepared again (a kubelet restart): same record.
	out, _ = d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, out[c.UID].Err)
	assert.Len(t, claims.List(), 1)

	res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "team", Name: "net"}, UID: c.UID}})
	require.NoError(t, err)
	require.NoError(t, res[c.UID])
	assert.Empty(t, claims.ForPod("pod-uid"))
	assert.Equal(t, []string{"uid-net"}, rel.uid)
	res, _ = d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "team", Name: "net"}, UID: c.UID}})
	assert.NoError(t, res[c.UID], "unprepare is idempotent")
}

func TestPrepareRefuses(t *testing.T) {
	d, claims, _ := newDriver(t, config.SharingSlots)
	slot := DeviceName("alpha") + "-3"
	for _, tc := range []struct {
		name string
		tune func(*resourceapi.ResourceClaim)
		msg  string
	}{
		{name: "not allocated", tune: func(c *resourceapi.ResourceClaim) { c.Status.Allocation = nil }, msg: "not allocated"},
		{name: "reserved for two pods", tune: func(c *resourceapi.ResourceClaim) {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", UID: "other"})
		}, msg: "reserved for 2 pods"},
		{name: "a standalone claim", tune: func(c *resourceapi.ResourceClaim) { c.OwnerReferences = nil },
			msg: "not owned by the pod it is reserved for"},
		{name: "unknown device", tune: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Device = "gone-0" },
			msg: `device gone-0): not a network device of this node (pool "node-1")`},
		{name: "another node's pool", tune: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].Pool = "node-2" },
			msg: "not a network device of this node"},
		{name: "admin access", tune: func(c *resourceapi.ResourceClaim) { c.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true) },
			msg: "admin access"},
		{name: "bad config names the claim and the key", tune: func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
				opaque(resourceapi.AllocationConfigSourceClaim, `"mac":"nope"`)}
		}, msg: `ResourceClaim team/net request "a" (device ` + slot + `): invalid NetworkConfig: the claim's config: "mac" "nope"`},
		{name: "filtered namespace", tune: func(c *resourceapi.ResourceClaim) { c.Namespace = "kube-system" },
			msg: `namespace "kube-system" is filtered out`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claim("team", "net", map[string]string{"a": slot})
			tc.tune(c)
			out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			require.NoError(t, err)
			require.Error(t, out[c.UID].Err)
			assert.Contains(t, out[c.UID].Err.Error(), tc.msg)
			assert.Empty(t, claims.List(), "nothing recorded")
		})
	}
}

// allowMultipleAllocations dropped by the API server (DRAConsumableCapacity
// off): with sharing auto the driver falls back to slots; claims allocated
// under either form still resolve.
func TestDroppedMultipleAllocationsFallsBackToSlots(t *testing.T) {
	d, _, _ := newDriver(t, config.SharingAuto)
	desired := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: d.Published().Devices}}
	actual := desired.DeepCopy()
	actual.Spec.Devices[0].AllowMultipleAllocations = nil
	d.HandleError(context.Background(), &resourceslice.DroppedFieldsError{PoolName: "node-1", DesiredSlice: desired, ActualSlice: actual}, "publishing")
	require.True(t, d.refresh())
	inv := d.Published()
	require.Len(t, inv.Devices, 16)
	assert.Nil(t, inv.Devices[0].AllowMultipleAllocations)
	for _, dev := range []string{DeviceName("alpha"), DeviceName("alpha") + "-15"} {
		n, ok := d.network("node-1", dev)
		assert.True(t, ok, dev)
		assert.Equal(t, "alpha", n)
	}
	_, ok := d.network("node-1", DeviceName("alpha")+"-x")
	assert.False(t, ok)
}

// Before the first publish, sharing "auto" asks the API server (a dry-run
// create) whether it keeps allowMultipleAllocations.
func TestProbeMultiple(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strip    bool
		err      error
		multiple bool
	}{
		{"kept (1.36+)", false, nil, true},
		{"dropped (1.34, 1.35)", true, nil, false},
		{"refused: the fallback stays", false, errors.New("forbidden"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _, _ := newDriver(t, config.SharingAuto)
			client := fake.NewClientset()
			var dryRun []string
			client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
				c := a.(k8stesting.CreateActionImpl)
				dryRun = c.CreateOptions.DryRun
				s := c.GetObject().(*resourceapi.ResourceSlice).DeepCopy()
				if tc.strip {
					s.Spec.Devices[0].AllowMultipleAllocations = nil
				}
				return true, s, tc.err
			})
			d.o.Client = client
			d.probeMultiple(context.Background())
			assert.Equal(t, []string{metav1.DryRunAll}, dryRun, "a dry run: nothing is stored")
			d.mu.Lock()
			assert.Equal(t, tc.multiple, d.multiple)
			d.mu.Unlock()
		})
	}
}

// A claim is prepared only while nri-cni serves the node's runtime: a
// prepare waits a while for it (a restart's reconnect), then fails so that
// the pod's sandbox does not start with nri-cni away; nothing is recorded.
func TestPrepareWaitsForServing(t *testing.T) {
	d, claims, _ := newDriver(t, config.SharingMultiple)
	c := claim("team", "net", map[string]string{"a": DeviceName("alpha")})
	var mu sync.Mutex
	serving := errors.New("not connected to the runtime's NRI socket")
	d.o.Serving = func() error { mu.Lock(); defer mu.Unlock(); return serving }
	go func() {
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		serving = nil
		mu.Unlock()
	}()
	out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, out[c.UID].Err, "prepared once nri-cni serves")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond) // the kubelet's call ends
	defer cancel()
	mu.Lock()
	serving = errors.New("not connected to the runtime's NRI socket")
	mu.Unlock()
	c2 := claim("team", "net2", map[string]string{"a": DeviceName("alpha")})
	c2.OwnerReferences[0].UID, c2.Status.ReservedFor[0].UID = "pod-2", "pod-2"
	out, err = d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c2})
	require.NoError(t, err)
	require.ErrorIs(t, out[c2.UID].Err, ErrNotServing)
	assert.ErrorContains(t, out[c2.UID].Err, "not connected to the runtime's NRI socket")
	assert.Empty(t, claims.ForPod("pod-2"), "not recorded")
}
