package hook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/state"
)

func TestGCTearsDownOnlyWhatIsGone(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	ctx := context.Background()
	_, err := f.mgr.Attach(ctx, pod("alive", 1))
	require.NoError(t, err)
	_, err = f.mgr.Attach(ctx, pod("dead", 2))
	require.NoError(t, err)
	_, err = f.mgr.Attach(ctx, pod("orphan", 3))
	require.NoError(t, err)
	f.ns.kill("/fake/netns/2")                         // its container died without poststop
	require.NoError(t, f.mgr.Store().Delete("orphan")) // a cache entry nobody claims

	res := f.mgr.GC(ctx, nil)
	require.NoError(t, res.Err())
	assert.Equal(t, GCResult{Kept: 1, TornDown: 1, StaleCached: 1}, res)

	var dels []string
	gcs := 0
	for _, c := range f.calls() {
		switch c.Cmd {
		case "DEL":
			dels = append(dels, c.ContainerID)
			assert.Empty(t, c.Netns, "GC DELs with an empty netns")
		case "GC":
			gcs++
		}
	}
	assert.ElementsMatch(t, []string{"dead", "orphan"}, dels)
	assert.Equal(t, 1, gcs, "the CNI 1.1 plugin GC ran once for the network")
	_, err = f.mgr.Store().Get("alive")
	require.NoError(t, err)
	_, err = f.mgr.Store().Get("dead")
	assert.ErrorIs(t, err, state.ErrNotFound)
	assert.Equal(t, 1, f.cached("alive"))
	assert.Equal(t, 0, f.cached("dead")+f.cached("orphan"))

	// A second pass has nothing to do.
	res = f.mgr.GC(ctx, nil)
	assert.Equal(t, GCResult{Kept: 1}, res)
}

func TestGCKeepsRecordWhoseDelFails(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "DEL", "failMsg": "busy"}})
	_, err := f.mgr.Attach(context.Background(), pod("dead", 2))
	require.NoError(t, err)
	f.ns.kill("/fake/netns/2")
	res := f.mgr.GC(context.Background(), nil)
	require.Error(t, res.Err())
	assert.Contains(t, res.Err().Error(), "busy")
	_, err = f.mgr.Store().Get("dead")
	require.NoError(t, err, "kept for the next pass")
}
