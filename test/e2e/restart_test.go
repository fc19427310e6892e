package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestPluginKilledBetweenRunAndStop(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{})
		id, st := s.mustRun("survivor")
		require.NotNil(t, s.net1(st.NetnsPath))
		s.killPlugin()
		s.startPlugin()

		require.NoError(t, s.cri.StopPod(s.ctx, id))
		assert.Empty(t, s.net.IPFilesOf(id), "the restarted plugin tore it down from its record")
		require.NoError(t, s.cri.RemovePod(s.ctx, id))
		s.assertNoLeaks()
		assert.Equal(t, 1, s.count("ADD", id), "no second ADD after the restart")
	})
}

// While nri-cni is away one pod is stopped and removed, another created; on
// reconnect the resync releases the first and attaches the second — on CRI-O
// with the infra container dropped too, where NRI lists the pod with Pid 0.
func TestResyncAfterDowntime(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{})
		gone, _ := s.mustRun("gone-while-down")
		kept, keptSt := s.mustRun("kept")
		require.Len(t, s.net.IPFilesOf(gone, kept), 2)

		s.killPlugin()
		// No NRI events reach nri-cni meanwhile; the new pod gets no net1.
		require.NoError(t, s.cri.StopPod(s.ctx, gone))
		require.NoError(t, s.cri.RemovePod(s.ctx, gone))
		born, bornSt := s.mustRun("born-while-down")
		require.Nil(t, s.net1(bornSt.NetnsPath))
		if dropsInfra(rt) {
			require.Zero(t, bornSt.Pid, "infra dropped: the runtime lists it with Pid 0")
		}

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
	})
}

// The runtime restarts under a live pod. nri-cni reconnects without a second
// ADD. containerd 2.x keeps its NRI pod state in memory and sends no
// Stop/Remove for pods from before the restart: the netns watcher releases
// the pod when its pinned netns goes. CRI-O does send them: Stop releases.
// Either way the address is released once, and the log says who did it.
func TestRuntimeRestartWithLivePods(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{})
		id, st := s.mustRun("old-timer")
		require.NotNil(t, s.net1(st.NetnsPath))
		synced := rt.CountLog(rt.PluginSynced("10-nri-cni"))

		require.NoError(t, rt.Restart(s.ctx))
		require.NoError(t, rt.WaitLog(s.ctx, rt.PluginSynced("10-nri-cni"), synced+1, 60*time.Second),
			"nri-cni reconnects to the restarted runtime")
		cri, err := harness.DialCRI(s.ctx, rt.CRIAddress())
		require.NoError(t, err)
		s.cri.Close()
		cri.Labels = owner(t)
		s.cri = cri
		require.NotNil(t, s.net1(st.NetnsPath), "still attached")
		assert.Equal(t, 1, s.count("ADD", id), "no second ADD after reconnecting")

		start := time.Now()
		require.NoError(t, s.cri.StopPod(s.ctx, id))
		require.NoError(t, s.cri.RemovePod(s.ctx, id))
		testenv.Eventually(t, 10*time.Second, "the pod's IP and record to be released", func() bool {
			return len(s.net.IPFilesOf(id)) == 0 && len(s.cfg.StateFilesOf(id)) == 0
		})
		t.Logf("released %s after the pod's removal", time.Since(start).Round(time.Millisecond))
		s.assertNoLeaks()
		assert.Equal(t, 1, s.count("DEL", id), "released once")
		// Who released it: the log line follows the release (the record is
		// gone first), so it is waited for, not read at once.
		who, why := "netns gone: networks released", "containerd forgot the pod: the watcher released it"
		if isCRIO(rt) {
			who, why = "event=StopPodSandbox", "CRI-O sends Stop for a pod from before its restart"
		}
		testenv.Eventually(t, 10*time.Second, why, func() bool { return strings.Contains(s.cfg.Log(), who) })
		s.assertAccurateLog(id)
	})
}

// A power loss left a live pod's record file empty. nri-cni restarts and
// resyncs: the pod keeps net1 (no DEL while the runtime runs it), its record
// is rebuilt from libcni's cache, and stopping the pod releases the address
// once. Before issue 18 the resync's GC DELed the running pod's network.
func TestDamagedRecordOfALivePod(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{})
		id, st := s.mustRun("damaged")
		require.NotNil(t, s.net1(st.NetnsPath))
		files := s.cfg.StateFilesOf(id)
		require.Len(t, files, 1)

		s.killPlugin()
		require.NoError(t, os.WriteFile(files[0], nil, 0o600))
		s.startPlugin()
		testenv.Eventually(t, 15*time.Second, "the resync to rebuild the record", func() bool {
			return strings.Contains(s.cfg.Log(), "rebuilt from libcni's cache")
		})
		assert.Zero(t, s.count("DEL", id), "nothing of a running pod is DELed")
		require.NotNil(t, s.net1(st.NetnsPath), "still attached")
		data, err := os.ReadFile(files[0])
		require.NoError(t, err)
		assert.Contains(t, string(data), `"phase":"attached"`, "the record is readable again")

		require.NoError(t, s.cri.StopPod(s.ctx, id))
		require.NoError(t, s.cri.RemovePod(s.ctx, id))
		testenv.Eventually(t, 10*time.Second, "the pod's IP and record to be released", func() bool {
			return len(s.net.IPFilesOf(id)) == 0 && len(s.cfg.StateFilesOf(id)) == 0
		})
		assert.Equal(t, 1, s.count("ADD", id), "no second ADD")
		s.assertNoLeaks()
	})
}
