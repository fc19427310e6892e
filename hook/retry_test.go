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
