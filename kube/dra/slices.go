package dra

// Splitting the node's devices into ResourceSlices. The ResourceSlice
// controller matches the slices it publishes by index and, when more than
// one slice changes or one is added, bumps the pool's generation and so
// writes every slice of the node. Cut in device order, one network added
// early in the order would shift every later device into the next slice:
// every slice written, on every node. packer keeps each network in the
// slice it was in, so a network added or removed changes one slice: one
// write per node.

import (
	"sort"

	resourceapi "k8s.io/api/resource/v1"
)

// packer remembers which slice each network's devices went to. Not safe
// for concurrent use (publish holds the driver's publishing lock).
type packer struct {
	at map[string]int // network -> slice index
}

type devGroup struct {
	network string
	devs    []resourceapi.Device
	order   int
}

// pack splits devices (grouped by network, networkOf naming each device's)
// into slices of at most maxSliceDevices: a network stays where it was if
// it still fits there; a new one goes to the first slice with room, else a
// new slice. When that leaves more than one slice beyond what the devices
// need, everything is packed afresh (one generation bump). Always at least
// one slice (an empty one publishes "no devices").
func (p *packer) pack(devices []resourceapi.Device, networkOf map[string]string) [][]resourceapi.Device {
	var groups []*devGroup
	byNet := map[string]*devGroup{}
	for _, d := range devices {
		n := networkOf[d.Name]
		g := byNet[n]
		if g == nil {
			g = &devGroup{network: n, order: len(groups)}
			byNet[n] = g
			groups = append(groups, g)
		}
		g.devs = append(g.devs, d)
	}
	need := max((len(devices)+maxSliceDevices-1)/maxSliceDevices, 1)
	slices := p.place(groups, need+1, true)
	if len(slices) > need+1 {
		slices = p.place(groups, need+1, false)
	}
	p.at = map[string]int{}
	out := make([][]resourceapi.Device, len(slices))
	for i, s := range slices {
		// Each slice in device order: the same groups publish the same
		// slice.
		sort.Slice(s, func(a, b int) bool { return s[a].order < s[b].order })
		for _, g := range s {
			out[i] = append(out[i], g.devs...)
			p.at[g.network] = i
		}
	}
	return out
}

// place puts the groups into slices: where they were (keep, and that
// index is below limit), then first fit.
func (p *packer) place(groups []*devGroup, limit int, keep bool) [][]*devGroup {
	var slices [][]*devGroup
	size := func(i int) int {
		n := 0
		for _, g := range slices[i] {
			n += len(g.devs)
		}
		return n
	}
	var rest []*devGroup
	for _, g := range groups {
		i, ok := p.at[g.network]
		if !keep || !ok || i >= limit {
			rest = append(rest, g)
			continue
		}
		for len(slices) <= i {
			slices = append(slices, nil)
		}
		if size(i)+len(g.devs) > maxSliceDevices {
			rest = append(rest, g)
			continue
		}
		slices[i] = append(slices[i], g)
	}
	for _, g := range rest {
		placed := false
		for i := range slices {
			if size(i)+len(g.devs) <= maxSliceDevices {
				slices[i] = append(slices[i], g)
				placed = true
				break
			}
		}
		if !placed {
			slices = append(slices, []*devGroup{g})
		}
	}
	for len(slices) > 1 && len(slices[len(slices)-1]) == 0 {
		slices = slices[:len(slices)-1]
	}
	if len(slices) == 0 {
		slices = [][]*devGroup{nil}
	}
	return slices
}
