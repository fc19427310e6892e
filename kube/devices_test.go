package kube

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube/dradevice"
	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/kube/podresources/podresourcestest"
)

// TestDeviceSource: a NAD's resourceName takes the pod's device plugin
// devices of it; without them, the devices other DRA drivers allocated to
// the pod's claims whose ResourceSlice publishes the resource (Multus ≥
// 4.3.1's attributes), in device ID order, skipping devices without the
// attribute (a GPU beside the VFs) and those of another resource.
func TestDeviceSource(t *testing.T) {
	const (
		res    = "vendor.example/vf"
		driver = "sriovnetwork.k8snetworkplumbingwg.io"
		node   = "node-a"
	)
	vf := func(name, addr, resource string) resourceapi.Device {
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"sriovnetwork.k8snetworkplumbingwg.io/pciAddress": {StringValue: ptr.To(addr)},
		}
		if resource != "" {
			attrs[dradevice.AttrCNIResourceName] = resourceapi.DeviceAttribute{StringValue: ptr.To(resource)}
			attrs["k8s.cni.cncf.io/deviceID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(addr)}
		}
		return resourceapi.Device{Name: name, Attributes: attrs}
	}
	slices := dradevice.StaticSlices{
		{ObjectMeta: metav1.ObjectMeta{Name: "vfs"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: []resourceapi.Device{
				vf("vf-2", "0000:3b:02.2", res), vf("vf-1", "0000:3b:02.1", res), vf("vf-9", "0000:3b:02.9", "vendor.example/other"),
				vf("gpu", "0000:af:00.0", "")}}},
	}
	withClaims := func(name string, devs ...string) *podresourcesv1.PodResources {
		p := podresourcestest.Pod("team-a", name, map[string][]string{})
		for _, d := range devs {
			p.Containers[0].DynamicResources = append(p.Containers[0].DynamicResources, podresourcestest.Claim("team-a", name+"-"+d, driver, node, d))
		}
		return p
	}
	tests := []struct {
		name    string
		pod     *podresourcesv1.PodResources
		dra     bool
		want    []attach.Device
		wantErr []string
	}{
		{name: "device plugin", pod: podresourcestest.Pod("team-a", "dp", map[string][]string{res: {"d1", "d0"}}), dra: true,
			want: []attach.Device{{ID: "d0"}, {ID: "d1"}}},
		{name: "DRA claims", pod: withClaims("dra", "vf-2", "gpu", "vf-1", "vf-9"), dra: true,
			want: []attach.Device{
				{ID: "0000:3b:02.1", From: `ResourceClaim team-a/dra-vf-1 request "" device ` + driver + "/node-a/vf-1"},
				{ID: "0000:3b:02.2", From: `ResourceClaim team-a/dra-vf-2 request "" device ` + driver + "/node-a/vf-2"}}},
		{name: "claims without the resource", pod: withClaims("gpu", "gpu", "vf-9"), dra: true,
			wantErr: []string{`resource "vendor.example/vf"`, "no device of the pod's 2 DRA claim(s) has the ResourceSlice attribute k8s.cni.cncf.io/resourceName"}},
		{name: "a claimed device not in the node's slices", pod: withClaims("lag", "vf-7"), dra: true,
			wantErr: []string{"no device of the pod's 1 DRA claim(s)"}},
		{name: "DRA off", pod: withClaims("off", "vf-1"),
			wantErr: []string{"no device of the resource allocated to the pod", "DRA claims: 1"}},
		{name: "neither", pod: podresourcestest.Pod("team-a", "plain", map[string][]string{"other.example/x": {"x0"}}), dra: true,
			wantErr: []string{`device plugin resources: ["other.example/x"]`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "kds")
			require.NoError(t, err)
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			srv, err := podresourcestest.Start(podresourcestest.Options{Dir: dir})
			require.NoError(t, err)
			t.Cleanup(srv.Stop)
			srv.SetPods(tc.pod)
			c, err := podresources.New(podresources.Options{Socket: srv.Socket})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			src := DeviceSource{Client: c}
			if tc.dra {
				src.DRA = &dradevice.Resolver{Slices: slices}
			}
			got, err := src.Devices(context.Background(), attach.DevicePod{Namespace: "team-a", Name: tc.pod.Name, UID: "uid"}, res)
			if tc.wantErr != nil {
				requireErrorContains(t, err, tc.wantErr...)
				return
			}
			require.NoError(t, err)
			for i := range got {
				if got[i].Info != nil {
					assert.Equal(t, got[i].ID, got[i].Info.PCI.PCIAddress, "device-info derived from the PCI address")
					got[i].Info = nil
				}
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// requireErrorContains: err is an error whose text has each of wants.
func requireErrorContains(t *testing.T, err error, wants ...string) {
	t.Helper()
	require.Error(t, err)
	for _, w := range wants {
		assert.Contains(t, err.Error(), w)
	}
}
