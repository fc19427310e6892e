package dradevice

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
)

// ListerSlices reads an informer's cache: the slices of one driver's pool.
func TestListerSlices(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, s := range []any{slice(sriov, "a", 1, sriovVF("0000:3b:02.2", "")), slice(dranet, "b", 1, dranetNIC()),
		slice(sriov, "c", 2, sriovVF("0000:3b:02.3", ""))} {
		require.NoError(t, idx.Add(s))
	}
	l := ListerSlices{Lister: resourcelisters.NewResourceSliceLister(idx)}
	got, err := l.ResourceSlices(sriov, node)
	require.NoError(t, err)
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	assert.ElementsMatch(t, []string{"a", "c"}, names)
	got, err = l.ResourceSlices(sriov, "node-2")
	require.NoError(t, err)
	assert.Empty(t, got)

	c := claim("c", "p", nil, []result{{"vf", sriov, "0000-3b-02-3"}})
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, exact("vf", sriov))
	devs, err := (&Resolver{Slices: l}).Resolve(c, Ref{Request: "vf"})
	require.NoError(t, err)
	assert.Equal(t, "0000:3b:02.3", devs[0].DeviceID, "the newest generation of the pool")
}
