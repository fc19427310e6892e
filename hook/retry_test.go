package hook

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/state"
)

func TestRetryBackoffDoublesUpToTheCap(t *testing.T) {
	var r retries
	now := time.Unix(1000, 0)
	var got []time.Duration
	for i := 0; i < 12; i++ {
		got = append(got, r.failed(pod("p", 0), false, now))
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, retryMax, retryMax, retryMax}, got)
	assert.Empty(t, r.due(now.Add(retryMax-time.Second)))
	assert.Len(t, r.due(now.Add(retryMax)), 1)
	r.done("p")
	assert.Zero(t, r.count())
}

// A DEL that keeps failing must not block the pod's deletion: Stop and
// Remove answer success, the record stays, and the background retry releases
// the network once the plugin works again.
func TestFailedTeardownNeverBlocksDeletionAndIsRetried(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken")
	require.NoError(t, os.WriteFile(broken, nil, 0o600))
	f := newFixture(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "DEL", "failWhile": broken}})
	p := NewPlugin(f.mgr, nil, logrus.NewEntry(logrus.New()))
	ctx := context.Background()

	require.NoError(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)))
	require.NoError(t, p.StopPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 0)), "Stop answers success")
	require.NoError(t, p.RemovePodSandbox(ctx, nriPod("sb1", "", 0)), "Remove answers success")
	_, err := f.mgr.Store().Get("sb1")
	require.NoError(t, err, "the record is kept for the retry")
	assert.Equal(t, 1, f.mgr.PendingTeardowns())

	f.mgr.retryTeardowns(ctx, time.Now().Add(time.Hour)) // still broken: rescheduled
	assert.Equal(t, 1, f.mgr.PendingTeardowns())

	require.NoError(t, os.Remove(broken)) // the plugin works again
	f.mgr.retryTeardowns(ctx, time.Now().Add(time.Hour))
	assert.Zero(t, f.mgr.PendingTeardowns())
	_, err = f.mgr.Store().Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound, "released and forgotten")
	assert.Equal(t, 0, f.cached("sb1"))
	dels := 0
	for _, c := range f.attachCmds() {
		if c == "DEL alpha net1" {
			dels++
		}
	}
	assert.GreaterOrEqual(t, dels, 3, "Stop, Remove and the retries each tried")
}

// The netns watcher logs "networks released" only when it really tore the
// attachment down: on CRI-O the netns goes before Stop, and the watcher can
// list the record before Stop tears it down, then wait for Stop's lock. What
// it logs must come from its own detach, not from that stale listing.
func TestDetachReportsWhetherItToreDown(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	ctx := context.Background()
	_, err := f.mgr.Attach(ctx, pod("stopped", 1))
	require.NoError(t, err)
	require.NoError(t, f.mgr.Detach(ctx, pod("stopped", 0), false)) // Stop won the race
	tore, err := f.mgr.detachReporting(ctx, pod("stopped", 0), true, 0)
	require.NoError(t, err)
	assert.False(t, tore, "Stop had released it: only the record is dropped")

	_, err = f.mgr.Attach(ctx, pod("forgotten", 2))
	require.NoError(t, err)
	tore, err = f.mgr.detachReporting(ctx, pod("forgotten", 0), true, 0)
	require.NoError(t, err)
	assert.True(t, tore, "no Stop came: the watcher released it")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1", "ADD alpha net1", "DEL alpha net1"}, f.attachCmds())
}
