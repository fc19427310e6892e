package kube

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/kube/dradevice"
	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/kube/podresources/podresourcestest"
)

// fakeClaims is a ClaimGetter over a map, counting GETs.
type fakeClaims struct {
	mu     sync.Mutex
	claims map[string]*resourceapi.ResourceClaim
	gets   []string
}

func (f *fakeClaims) Claim(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets = append(f.gets, name)
	if c, ok := f.claims[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

// TestClaimDevices: a network naming <claim>/<request> takes the devices
// allocated for that request of the pod's claim, found by the claim's own
// name or by the pod's name for it (a claim made from a template), the ID
// from the driver's status data or its slice (dranet publishes no
// k8s.cni.cncf.io attribute); a claim not the pod's, not reserved for it,
// or without the request is refused, naming it.
func TestClaimDevices(t *testing.T) {
	const (
		ns, podName, uid = "team-a", "web-0", "pod-uid"
		driver, node     = "dra.net", "node-a"
	)
	nic := func(name, addr string) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"dra.net/pciAddress": {StringValue: ptr.To(addr)}, "dra.net/ifName": {StringValue: ptr.To("eth-" + name)}}}
	}
	slices := dradevice.StaticSlices{{ObjectMeta: metav1.ObjectMeta{Name: "nics"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{nic("nic1", "0000:8a:00.1"), nic("nic2", "0000:8a:00.2"), nic("nic3", "0000:8a:00.3")}}}}
	claim := func(name, podClaim, reservedFor string, results map[string][]string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: podName, UID: uid}}}}
		if reservedFor != "" {
			c.Status.ReservedFor[0].UID = types.UID("other-" + reservedFor)
		}
		if podClaim != "" {
			c.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: podClaim}
		}
		for _, rq := range []string{"data", "mgmt"} {
			c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: rq,
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic"}})
			for _, dev := range results[rq] {
				c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
					resourceapi.DeviceRequestAllocationResult{Request: rq, Driver: driver, Pool: node, Device: dev})
			}
		}
		return c
	}
	// web-0's claims: one from a template (pod claim "nics"), one it names
	// directly ("shared-mgmt"); "foreign" is another pod's.
	fromTemplate := claim(podName+"-nics-x7k2p", "nics", "", map[string][]string{"data": {"nic2", "nic1"}})
	direct := claim("shared-mgmt", "", "", map[string][]string{"mgmt": {"nic3"}})
	// The driver wrote the ID in status data for nic2 (what wins over the slice).
	fromTemplate.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: driver, Pool: node, Device: "nic2",
		Data: &runtime.RawExtension{Raw: []byte(`{"pciAddress":"0000:8a:00.2"}`)}}}
	notReserved := claim("borrowed", "", "x", map[string][]string{"data": {"nic3"}})
	getter := &fakeClaims{claims: map[string]*resourceapi.ResourceClaim{
		ns + "/" + fromTemplate.Name: fromTemplate, ns + "/shared-mgmt": direct, ns + "/borrowed": notReserved,
		ns + "/foreign": claim("foreign", "", "", map[string][]string{"data": {"nic3"}})}}

	pod := podresourcestest.Pod(ns, podName, map[string][]string{})
	for _, c := range []*resourceapi.ResourceClaim{fromTemplate, direct, notReserved} {
		for _, r := range c.Status.Allocation.Devices.Results {
			pod.Containers[0].DynamicResources = append(pod.Containers[0].DynamicResources, podresourcestest.Claim(ns, c.Name, driver, node, r.Device))
		}
	}
	tests := []struct {
		name     string
		ref      cni.ClaimRequest
		want     []string // device IDs
		wantFrom string   // of the first
		wantGets int
		wantErr  []string
	}{
		{name: "pod claim name of a template's claim", ref: cni.ClaimRequest{Claim: "nics", Request: "data"},
			want: []string{"0000:8a:00.2", "0000:8a:00.1"}, wantGets: 1,
			wantFrom: `ResourceClaim team-a/web-0-nics-x7k2p request "data" device dra.net/node-a/nic2`},
		{name: "the ResourceClaim's own name", ref: cni.ClaimRequest{Claim: "shared-mgmt", Request: "mgmt"},
			want: []string{"0000:8a:00.3"}, wantGets: 1},
		{name: "a request without devices", ref: cni.ClaimRequest{Claim: "shared-mgmt", Request: "data"},
			wantErr: []string{"ResourceClaim team-a/shared-mgmt", `request "data"`, "no device allocated"}},
		{name: "no such request", ref: cni.ClaimRequest{Claim: "nics", Request: "storage"},
			wantErr: []string{"no such request", "data, mgmt"}},
		{name: "another pod's claim", ref: cni.ClaimRequest{Claim: "foreign", Request: "data"},
			wantErr: []string{`the pod has no such claim "foreign"`, "web-0-nics-x7k2p, shared-mgmt, borrowed"}},
		{name: "not reserved for the pod", ref: cni.ClaimRequest{Claim: "borrowed", Request: "data"},
			wantErr: []string{"ResourceClaim team-a/borrowed", "not reserved for the pod"}},
	}
	dir, err := os.MkdirTemp("", "kcd")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	srv, err := podresourcestest.Start(podresourcestest.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	srv.SetPods(pod)
	c, err := podresources.New(podresources.Options{Socket: srv.Socket})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getter.gets = nil
			src := DeviceSource{Client: c, DRA: &dradevice.Resolver{Slices: slices}, Claims: getter}
			got, err := src.ClaimDevices(context.Background(), attach.DevicePod{Namespace: ns, Name: podName, UID: uid}, tc.ref)
			if tc.wantErr != nil {
				requireErrorContains(t, err, tc.wantErr...)
				return
			}
			require.NoError(t, err)
			var ids []string
			for _, d := range got {
				ids = append(ids, d.ID)
			}
			assert.Equal(t, tc.want, ids, "in allocation order")
			if tc.wantFrom != "" {
				assert.Equal(t, tc.wantFrom, got[0].From)
			}
			assert.Len(t, getter.gets, tc.wantGets, "GETs: %v", getter.gets)
		})
	}

	t.Run("without DRA", func(t *testing.T) {
		_, err := DeviceSource{Client: c}.ClaimDevices(context.Background(), attach.DevicePod{Namespace: ns, Name: podName, UID: uid},
			cni.ClaimRequest{Claim: "nics", Request: "data"})
		assert.ErrorContains(t, err, "reads no ResourceClaims here")
	})
	t.Run("a pod with more claims than nri-cni reads", func(t *testing.T) {
		many := podresourcestest.Pod(ns, "many", map[string][]string{})
		for i := 0; i <= MaxPodClaims; i++ {
			many.Containers[0].DynamicResources = append(many.Containers[0].DynamicResources, podresourcestest.Claim(ns, fmt.Sprintf("c%d", i), driver, node, "nic1"))
		}
		srv.AddPod(many)
		getter.gets = nil
		src := DeviceSource{Client: c, DRA: &dradevice.Resolver{Slices: slices}, Claims: getter}
		_, err := src.ClaimDevices(context.Background(), attach.DevicePod{Namespace: ns, Name: "many", UID: "u"}, cni.ClaimRequest{Claim: "nics", Request: "data"})
		assert.ErrorContains(t, err, fmt.Sprintf("the pod has %d claims, more than the %d", MaxPodClaims+1, MaxPodClaims))
		assert.Empty(t, getter.gets, "no GET for a pod over the bound")
	})
}
