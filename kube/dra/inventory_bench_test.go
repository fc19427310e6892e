package dra

import (
	"encoding/json"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/nri-cni/nri-cni/cni"
)

// BenchmarkInventory: what each way of sharing costs the node's
// ResourceSlices, which every scheduler and kubelet watches, for 32
// networks with /24 host-local pools: devices, slices and bytes published,
// and the time to build them.
func BenchmarkInventory(b *testing.B) {
	var cands []Candidate
	for i := range 32 {
		n, err := cni.Parse(fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":"net%d","plugins":[{"type":"macvlan","master":"eth0",`+
			`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.%d.0.0/24"}]]}}]}`, i, i))
		if err != nil {
			b.Fatal(err)
		}
		c := Candidate{Network: n.Name, Net: n, Local: true}
		if i%2 == 1 {
			c.Network, c.Namespace, c.Local = "team-a/"+n.Name, "team-a", false
		}
		cands = append(cands, c)
	}
	for _, tc := range []struct {
		name string
		o    InventoryOptions
	}{
		{"multiple", InventoryOptions{Multiple: true, MaxDevices: 4096}},
		{"slots-16", InventoryOptions{Slots: 16, MaxDevices: 4096}},
		{"slots-64", InventoryOptions{Slots: 64, MaxDevices: 4096}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var inv Inventory
			for b.Loop() {
				inv = BuildInventory(cands, func(Candidate) error { return nil }, tc.o)
			}
			slices, size := 0, 0
			for devs := inv.Devices; len(devs) > 0; slices++ {
				n := min(len(devs), resourceapi.ResourceSliceMaxDevices)
				s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: new("node-1"),
					Pool: resourceapi.ResourcePool{Name: "node-1", ResourceSliceCount: 1}, Devices: devs[:n]}}
				data, err := json.Marshal(s)
				if err != nil {
					b.Fatal(err)
				}
				size += len(data)
				devs = devs[n:]
			}
			b.ReportMetric(float64(len(inv.Devices)), "devices")
			b.ReportMetric(float64(slices), "slices")
			b.ReportMetric(float64(size)/1024, "KiB")
		})
	}
}
