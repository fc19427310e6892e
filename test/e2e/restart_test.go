package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestPluginKilledBetweenRunAndStop(t *testing.T) {
	s := newSuite(t, suiteOpts{})
	id, st := s.mustRun("survivor")
	require.NotNil(t, s.net1(st.NetnsPath))
	s.killPlugin()
	s.startPlugin()

	require.NoError(t, s.cri.StopPod(s.ctx, id))
	assert.Empty(t, s.net.IPFilesOf(id), "the restarted plugin tore it down from its record")
	require.NoError(t, s.cri.RemovePod(s.ctx, id))
	s.assertNoLeaks()
	assert.Equal(t, 1, s.count("ADD", id), "no second ADD after the restart")
}

func TestResyncAfterDowntime(t *testing.T) {
	s := newSuite(t, suiteOpts{})
	gone, _ := s.mustRun("gone-while-down")
	kept, keptSt := s.mustRun("kept")
	require.Len(t, s.net.IPFilesOf(gone, kept), 2)

	s.killPlugin()
	// While nri-cni is away: one pod is stopped and removed (no NRI events
	// reach nri-cni), another is created (it gets no net1).
	require.NoError(t, s.cri.StopPod(s.ctx, gone))
	require.NoError(t, s.cri.RemovePod(s.ctx, gone))
	born, bornSt := s.mustRun("born-while-down")
	require.Nil(t, s.net1(bornSt.NetnsPath))

	s.startPlugin() // Synchronize: GC the gone pod, attach the new one
	testenv.Eventually(t, 15*time.Second, "the resync", func() bool {
		return s.count("ADD", born) == 1 && s.count("DEL", gone) == 1
	})
	require.NotNil(t, s.net1(bornSt.NetnsPath), "attached on resync (syncAttach)")
	require.NotNil(t, s.net1(keptSt.NetnsPath))
	assert.Equal(t, 1, s.count("ADD", kept), "a pod already attached is not attached again")
	assert.Empty(t, s.net.IPFilesOf(gone), "the gone pod's IP was released")
	assert.Len(t, s.net.IPFilesOf(kept, born), 2, "the new one's allocated")
	assert.Contains(t, s.cfg.Log(), "resync with the runtime done")

	for _, id := range []string{kept, born} {
		require.NoError(t, s.cri.StopPod(s.ctx, id))
		require.NoError(t, s.cri.RemovePod(s.ctx, id))
	}
	s.assertNoLeaks()
}

// TestContainerdRestartWithLivePods: containerd 2.x keeps its NRI pod state
// in memory, so after a restart it sends no Stop/Remove for the pods it had
// before. nri-cni must reconnect, not ADD again, and notice on its own (the
// pinned netns disappearing) when those pods are torn down.
func TestContainerdRestartWithLivePods(t *testing.T) {
	s := newSuite(t, suiteOpts{})
	id, st := s.mustRun("old-timer")
	require.NotNil(t, s.net1(st.NetnsPath))
	synced := s.ctd.CountLog(harness.PluginSynced("10-nri-cni"))

	require.NoError(t, s.ctd.Restart(s.ctx))
	require.NoError(t, s.ctd.WaitLog(s.ctx, harness.PluginSynced("10-nri-cni"), synced+1, 30*time.Second),
		"nri-cni reconnects to the restarted containerd")
	cri, err := harness.DialCRI(s.ctx, s.ctd.Address)
	require.NoError(t, err)
	s.cri.Close()
	s.cri = cri
	require.NotNil(t, s.net1(st.NetnsPath), "still attached")
	assert.Equal(t, 1, s.count("ADD", id), "no second ADD after reconnecting")

	start := time.Now()
	require.NoError(t, s.cri.StopPod(s.ctx, id))
	require.NoError(t, s.cri.RemovePod(s.ctx, id))
	testenv.Eventually(t, 10*time.Second, "the pod's IP and record to be released by the netns watcher", func() bool {
		return len(s.net.IPFilesOf(id)) == 0 && len(s.cfg.StateFilesOf(id)) == 0
	})
	t.Logf("released %s after the pod's removal", time.Since(start).Round(time.Millisecond))
	s.assertNoLeaks()
	assert.Contains(t, s.cfg.Log(), "netns gone: networks released")
}
