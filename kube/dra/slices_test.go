package dra

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
)

// devicesOf: n networks named by names, per devices each, as an inventory
// lists them.
func devicesOf(names []string, per int) ([]resourceapi.Device, map[string]string) {
	var devs []resourceapi.Device
	networks := map[string]string{}
	for _, n := range names {
		for i := range per {
			d := resourceapi.Device{Name: fmt.Sprintf("%s-%d", n, i)}
			devs = append(devs, d)
			networks[d.Name] = n
		}
	}
	return devs, networks
}

func names(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%03d", prefix, i))
	}
	return out
}

// changedSlices counts the slices that differ between two packings (what
// the ResourceSlice controller would write; with more than one, it bumps
// the generation and writes them all).
func changedSlices(a, b [][]resourceapi.Device) int {
	n := 0
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || !sameNames(a[i], b[i]) {
			n++
		}
	}
	return n
}

func sameNames(a, b []resourceapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
	}
	return true
}

// A network added early in the order, or removed, changes one slice, not
// every later one: one write per node per NAD change.
func TestPackKeepsNetworksWhereTheyWere(t *testing.T) {
	for _, per := range []int{1, 16} {
		t.Run(fmt.Sprintf("%d devices per network", per), func(t *testing.T) {
			var p packer
			nets := names("m", 400/per)
			devs, networks := devicesOf(nets, per)
			before := p.pack(devs, networks)
			for _, s := range before {
				require.LessOrEqual(t, len(s), maxSliceDevices)
			}
			// "a000" sorts before every other network: cut in order,
			// every slice would change.
			added := append([]string{"a000"}, nets...)
			devs, networks = devicesOf(added, per)
			after := p.pack(devs, networks)
			assert.Equal(t, 1, changedSlices(before, after), "a network added: one slice changes")
			total := 0
			for _, s := range after {
				require.LessOrEqual(t, len(s), maxSliceDevices)
				total += len(s)
			}
			assert.Equal(t, len(devs), total, "every device published once")

			devs, networks = devicesOf(append([]string{added[0]}, added[3:]...), per) // two of one slice removed
			again := p.pack(devs, networks)
			assert.Equal(t, 1, changedSlices(after, again), "networks removed from one slice: one slice changes")
		})
	}
}

// Removing most networks leaves fragments; past one slice more than the
// devices need, everything is packed afresh.
func TestPackCompactsWhenFragmented(t *testing.T) {
	var p packer
	nets := names("n", 512)
	devs, networks := devicesOf(nets, 1)
	require.Len(t, p.pack(devs, networks), 4)
	var kept []string
	for i, n := range nets {
		if i%128 == 0 { // one network left in each of the four slices
			kept = append(kept, n)
		}
	}
	devs, networks = devicesOf(kept, 1)
	out := p.pack(devs, networks)
	assert.LessOrEqual(t, len(out), 2, "4 devices: one slice, plus at most one")
	total := 0
	for _, s := range out {
		total += len(s)
	}
	assert.Equal(t, 4, total)
	assert.Equal(t, [][]resourceapi.Device{nil}, p.pack(nil, nil), "no devices: one empty slice")
}
