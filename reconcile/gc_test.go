package reconcile

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/state"
)

func TestGCTearsDownOnlyWhatIsGone(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	ctx := context.Background()
	_, err := f.Mgr.Attach(ctx, attachtest.Pod("alive", 1))
	require.NoError(t, err)
	_, err = f.Mgr.Attach(ctx, attachtest.Pod("dead", 2))
	require.NoError(t, err)
	_, err = f.Mgr.Attach(ctx, attachtest.Pod("orphan", 3))
	require.NoError(t, err)
	f.Netns.Kill("/fake/netns/2")                // its container died without poststop
	require.NoError(t, f.Store.Delete("orphan")) // a cache entry nobody claims

	res := GC(ctx, f.Mgr, nil)
	require.NoError(t, res.Err())
	assert.Equal(t, GCResult{Kept: 1, TornDown: 1, StaleCached: 1}, res)

	var dels []string
	gcs := 0
	for _, c := range f.Calls() {
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
	_, err = f.Store.Get("alive")
	require.NoError(t, err)
	_, err = f.Store.Get("dead")
	assert.ErrorIs(t, err, state.ErrNotFound)
	assert.Equal(t, 1, f.Cached("alive"))
	assert.Equal(t, 0, f.Cached("dead")+f.Cached("orphan"))

	// A second pass has nothing to do.
	res = GC(ctx, f.Mgr, nil)
	assert.Equal(t, GCResult{Kept: 1}, res)
}

func TestGCKeepsRecordWhoseDelFails(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "DEL", "failMsg": "busy"}})
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("dead", 2))
	require.NoError(t, err)
	f.Netns.Kill("/fake/netns/2")
	res := GC(context.Background(), f.Mgr, nil)
	require.Error(t, res.Err())
	assert.Contains(t, res.Err().Error(), "busy")
	_, err = f.Store.Get("dead")
	require.NoError(t, err, "kept for the next pass")
}
