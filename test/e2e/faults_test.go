package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
)

// A hanging plugin must end in nri-cni's own error before the runtime's 2s
// plugin request timeout, or the runtime drops nri-cni for good (both log
// "closing plugin" when they do).
func TestHangingPluginFailsThePodWithinTheDeadline(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		s := newSuite(t, rt, suiteOpts{recorder: map[string]any{"sleep": "30s"}})
		dropped := rt.CountLog("closing plugin 10-nri-cni") // this test's own, not earlier ones
		start := time.Now()
		_, err := s.run(harness.PodSpec{Name: "stuck"})
		took := time.Since(start)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `plugin type="cni-recorder"`, "names the plugin")
		assert.Contains(t, err.Error(), "timed out")
		s.assertNoLeaks()
		assert.Equal(t, dropped, rt.CountLog("closing plugin 10-nri-cni"), "the runtime did not drop nri-cni")
		t.Logf("RunPodSandbox failed after %s", took.Round(time.Millisecond))

		// Still connected and serving: the next event reaches it.
		_, err = s.run(harness.PodSpec{Name: "stuck-too"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "cni-recorder")
	})
}

func TestFailurePolicyIgnoreStartsThePod(t *testing.T) {
	s := newSuite(t, world.ctd, suiteOpts{
		recorder: map[string]any{"failOn": "ADD", "failMsg": "switch unreachable"},
		edit:     func(_ string, c *harness.PluginConfig) { c.FailurePolicy = "ignore" },
	})
	id, st := s.mustRun("tolerant")
	assert.Equal(t, "SANDBOX_READY", st.State)
	assert.Nil(t, s.net1(st.NetnsPath), "no net1")
	s.assertNoLeaks()
	assert.True(t, strings.Contains(s.cfg.Log(), "switch unreachable") && strings.Contains(s.cfg.Log(), "starts without"),
		"the failure is logged with the pod")
	require.NoError(t, s.cri.StopPod(s.ctx, id))
	require.NoError(t, s.cri.RemovePod(s.ctx, id))
}

func TestBrokenPluginsGiveClearErrors(t *testing.T) {
	for name, rec := range map[string]map[string]any{
		"crash":   {"crash": true},
		"garbage": {"garbage": true},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSuite(t, world.ctd, suiteOpts{recorder: rec})
			_, err := s.run(harness.PodSpec{Name: "victim-" + name})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "cni-recorder")
			s.assertNoLeaks()
		})
	}
}
