package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

func TestDiffPlan(t *testing.T) {
	p := New(config.Default(), Catalogue{})
	rec := []state.Network{{Name: "a", IfName: "net1"}, {Name: "b", IfName: "net2"}, {Name: "c", IfName: "eth5"}}
	atts := []Attachment{
		{Network: &cni.Network{Name: "b"}, IfName: "net1"},                 // auto: keeps net2
		{Network: &cni.Network{Name: "c"}, IfName: "eth6", Explicit: true}, // moved: re-attached
		{Network: &cni.Network{Name: "d"}, IfName: "net2"},                 // new: a free name
	}
	keep, add, remove := p.Diff(rec, atts)
	assert.Equal(t, map[int]int{0: 1}, keep)
	require.Len(t, add, 2)
	assert.Equal(t, "eth6", add[0].IfName)
	assert.Equal(t, "net1", add[1].IfName, "net1 is free once a is removed; net2 is b's")
	assert.Equal(t, []int{0, 2}, remove)
}
