package attach_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
)

// The netns watcher logs "networks released" only when it really tore the
// attachment down: on CRI-O the netns goes before Stop, and the watcher can
// list the record before Stop tears it down, then wait for Stop's lock. What
// it logs must come from its own detach, not from that stale listing.
func TestDetachReportsWhetherItToreDown(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	ctx := context.Background()
	_, err := f.Mgr.Attach(ctx, attachtest.Pod("stopped", 1))
	require.NoError(t, err)
	require.NoError(t, f.Mgr.Detach(ctx, attachtest.Pod("stopped", 0), false)) // Stop won the race
	tore, err := f.Mgr.DetachWithin(ctx, attachtest.Pod("stopped", 0), true, 0)
	require.NoError(t, err)
	assert.False(t, tore, "Stop had released it: only the record is dropped")

	_, err = f.Mgr.Attach(ctx, attachtest.Pod("forgotten", 2))
	require.NoError(t, err)
	tore, err = f.Mgr.DetachWithin(ctx, attachtest.Pod("forgotten", 0), true, 0)
	require.NoError(t, err)
	assert.True(t, tore, "no Stop came: the watcher released it")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1", "ADD alpha net1", "DEL alpha net1"}, f.AttachCmds())
}
