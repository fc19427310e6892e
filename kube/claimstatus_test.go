package kube

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/state"
)

func claimRef(name, device string) *state.ClaimRef {
	return &state.ClaimRef{Namespace: "ns1", Name: name, UID: "uid-" + name, Request: "net", Driver: "nri-cni.io",
		Pool: "node-1", Device: device}
}

func TestClaimPatch(t *testing.T) {
	now := metav1.NewTime(time.Unix(100, 0))
	ref := claimRef("c1", "net-a-1")
	ref.ShareID = "share-1"
	ips := []string{}
	for i := range 20 {
		ips = append(ips, "10.0.0."+string(rune('0'+i%10))+"/24")
	}
	cs := &claimStatus{Namespace: "ns1", Name: "c1", UID: "uid-c1", Devices: []attach.NetworkStatus{
		{Name: "alpha", Interface: "data0", Mac: "02:00:00:00:00:01", Claim: ref, IPNets: ips, Result: []byte(`{"cniVersion":"1.1.0"}`)},
		{Name: "beta", Interface: "net2", Claim: claimRef("c1", "net-b-0"), Result: []byte(`"` + strings.Repeat("x", 11<<10) + `"`)},
	}}
	other := resourcev1.AllocatedDeviceStatus{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "c1", UID: "uid-c1", ResourceVersion: "42"},
		Status: resourcev1.ResourceClaimStatus{Devices: []resourcev1.AllocatedDeviceStatus{other,
			{Driver: claimDriver, Pool: "node-1", Device: "net-old"}}}}
	patch, err := claimPatch(claim, cs, now)
	require.NoError(t, err)
	var ops []struct {
		Op, Path string
		Value    json.RawMessage
	}
	require.NoError(t, json.Unmarshal(patch, &ops))
	require.Len(t, ops, 2)
	assert.Equal(t, "/metadata/resourceVersion", ops[0].Path, "guarded by the resourceVersion read")
	assert.JSONEq(t, `"42"`, string(ops[0].Value))
	assert.Equal(t, []string{"add", "/status/devices"}, []string{ops[1].Op, ops[1].Path})
	var got []resourcev1.AllocatedDeviceStatus
	require.NoError(t, json.Unmarshal(ops[1].Value, &got))
	require.Len(t, got, 3, "another driver's entry kept, nri-cni's old one replaced")
	assert.Equal(t, other, got[0])
	d := got[1]
	assert.Equal(t, []string{"nri-cni.io", "node-1", "net-a-1", "share-1"}, []string{d.Driver, d.Pool, d.Device, *d.ShareID})
	require.Len(t, d.Conditions, 1)
	assert.Equal(t, "Ready", d.Conditions[0].Type)
	assert.Equal(t, metav1.ConditionTrue, d.Conditions[0].Status)
	assert.Equal(t, "data0", d.NetworkData.InterfaceName)
	assert.Len(t, d.NetworkData.IPs, 16, "networkData.ips holds at most 16")
	assert.Equal(t, "02:00:00:00:00:01", d.NetworkData.HardwareAddress)
	assert.JSONEq(t, `{"cniVersion":"1.1.0"}`, string(d.Data.Raw))
	assert.Nil(t, got[2].ShareID)
	assert.Nil(t, got[2].Data, "data past 10 KiB is left out")

	// Written already: nothing to patch, even at a later time.
	claim.Status.Devices = got
	patch, err = claimPatch(claim, cs, metav1.NewTime(time.Unix(200, 0)))
	require.NoError(t, err)
	assert.Nil(t, patch, "an unchanged status is not written again")

	// Released: only nri-cni's entries go.
	patch, err = claimPatch(claim, &claimStatus{Namespace: "ns1", Name: "c1", UID: "uid-c1"}, now)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(patch, &ops))
	require.NoError(t, json.Unmarshal(ops[1].Value, &got))
	assert.Equal(t, []resourcev1.AllocatedDeviceStatus{other}, got)
	claim.Status.Devices = got[:0]
	patch, err = claimPatch(claim, &claimStatus{Namespace: "ns1", Name: "c1", UID: "uid-c1"}, now)
	require.NoError(t, err)
	assert.Nil(t, patch)
}

func TestClaimDriverIsDRAs(t *testing.T) {
	assert.Equal(t, dra.DriverName, claimDriver)
}

// The writer queues a pod's claims beside its network-status and writes
// each to its claim; a released claim loses nri-cni's entries.
func TestStatusWriterWritesClaims(t *testing.T) {
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "c1", UID: "uid-c1"}}
	client := fake.NewClientset(testPod(), claim)
	w := NewStatusWriter(client, record.NewFakeRecorder(10), quietLog(), StatusOptions{BaseDelay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, 1)

	pn := sample()
	pn.Networks = append(pn.Networks, attach.NetworkStatus{Name: "alpha", Interface: "data0", Claim: claimRef("c1", "net-a"),
		IPNets: []string{"10.1.0.9/24"}})
	w.PodNetworks(pn)
	require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 5*time.Millisecond)
	got, err := client.ResourceV1().ResourceClaims("ns1").Get(ctx, "c1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, got.Status.Devices, 1)
	assert.Equal(t, "data0", got.Status.Devices[0].NetworkData.InterfaceName)
	pod, err := client.CoreV1().Pods("ns1").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, pod.Annotations[AnnotationNetworkStatus], `"name": "alpha"`, "network-status lists the claim's network too")

	// Multus writes network-status: only the claim is written.
	w.ClaimReleased("ns1", "c1", "uid-c1")
	require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 5*time.Millisecond)
	got, err = client.ResourceV1().ResourceClaims("ns1").Get(ctx, "c1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Status.Devices)

	// A claim replaced by another of its name is not written, nor retried.
	replaced := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "c2", UID: "uid-new"}}
	_, err = client.ResourceV1().ResourceClaims("ns1").Create(ctx, replaced, metav1.CreateOptions{})
	require.NoError(t, err)
	pn.Networks = append(pn.Networks, attach.NetworkStatus{Name: "beta", Interface: "net3", Claim: claimRef("c2", "net-b")})
	w.PodNetworks(pn)
	require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 5*time.Millisecond)
	got, err = client.ResourceV1().ResourceClaims("ns1").Get(ctx, "c2", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Status.Devices)

	// A claim that is gone is not retried.
	w.ClaimReleased("ns1", "gone", "uid-gone")
	require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 5*time.Millisecond)
}
