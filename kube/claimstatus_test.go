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
	"github.com/nri-cni/nri-cni/state"
)

func claimRef(name, device string) *state.ClaimRef {
	return &state.ClaimRef{Namespace: "ns1", Name: name, UID: "uid-" + name, Request: "net", Driver: "nri-cni.io",
		Pool: "node-1", Device: device}
}

func TestClaimApply(t *testing.T) {
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
	ac, err := claimApply(cs, now)
	require.NoError(t, err)
	data, err := json.Marshal(ac)
	require.NoError(t, err)
	var got struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
		Status resourcev1.ResourceClaimStatus `json:"status"`
	}
	require.NoError(t, json.Unmarshal(data, &got))
	assert.Equal(t, "uid-c1", got.Metadata.UID, "guarded by the claim's UID")
	require.Len(t, got.Status.Devices, 2)
	d := got.Status.Devices[0]
	assert.Equal(t, []string{"nri-cni.io", "node-1", "net-a-1", "share-1"}, []string{d.Driver, d.Pool, d.Device, *d.ShareID})
	require.Len(t, d.Conditions, 1)
	assert.Equal(t, "Ready", d.Conditions[0].Type)
	assert.Equal(t, metav1.ConditionTrue, d.Conditions[0].Status)
	assert.Equal(t, "data0", d.NetworkData.InterfaceName)
	assert.Len(t, d.NetworkData.IPs, 16, "networkData.ips holds at most 16")
	assert.Equal(t, "02:00:00:00:00:01", d.NetworkData.HardwareAddress)
	assert.JSONEq(t, `{"cniVersion":"1.1.0"}`, string(d.Data.Raw))
	assert.Nil(t, got.Status.Devices[1].ShareID)
	assert.Nil(t, got.Status.Devices[1].Data, "data past 10 KiB is left out")

	// Released: no entries; server-side apply removes those nri-cni's
	// field manager applied before.
	ac, err = claimApply(&claimStatus{Namespace: "ns1", Name: "c1", UID: "uid-c1"}, now)
	require.NoError(t, err)
	data, _ = json.Marshal(ac)
	assert.NotContains(t, string(data), `"devices"`)
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

	// A claim that is gone is not retried.
	w.ClaimReleased("ns1", "gone", "uid-gone")
	require.Eventually(t, func() bool { return w.Pending() == 0 }, 10*time.Second, 5*time.Millisecond)
}
