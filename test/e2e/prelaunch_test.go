package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestPrelaunchedDropIn: the binary as <plugin dir>/10-nri-cni and its config
// as <plugin config dir>/10-nri-cni.conf; the runtime starts it (containerd:
// plugin_path / plugin_config_path; CRI-O: nri_plugin_dir /
// nri_plugin_config_dir). Each gets a runtime of its own: pre-launched
// plugins start with the runtime.
func TestPrelaunchedDropIn(t *testing.T) {
	testenv.RequireRoot(t)
	for _, kind := range []string{"containerd", "crio-infra-dropped"} {
		t.Run(kind, func(t *testing.T) { prelaunched(t, kind) })
	}
}

func prelaunched(t *testing.T, kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sec, cfg, _ := pluginSetup(t, t.TempDir())

	dir, err := os.MkdirTemp("", "pre")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Both runtimes take these two dirs under their own.
	pluginDir, confDir := filepath.Join(dir, "nri-plugins"), filepath.Join(dir, "nri-conf.d")
	require.NoError(t, os.MkdirAll(pluginDir, 0o755))
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	data, err := os.ReadFile(world.bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(pluginDir, "10-nri-cni"), data, 0o755))
	require.NoError(t, cfg.Write(filepath.Join(confDir, "10-nri-cni.conf")))

	var rt harness.Runtime
	if kind == "containerd" {
		rt, err = startContainerd(ctx, dir)
	} else {
		rt, err = startCRIO(ctx, dir, true)
	}
	require.NoError(t, err)
	require.Equal(t, pluginDir, rt.NRIPluginPath())
	closed := false
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s\n%s log tail:\n%s", cfg.Log(), kind, rt.LogTail(40))
		}
		if !closed {
			cleanupPods(t, rt.CRIAddress())
			assert.NoError(t, rt.Close(context.Background()))
		}
	})
	require.NoError(t, rt.WaitLog(ctx, rt.PrelaunchedSynced("10-nri-cni"), 1, 15*time.Second))

	cri := dialCRI(ctx, t, rt.CRIAddress())
	defer cri.Close()
	id, err := cri.RunPod(ctx, harness.PodSpec{Name: "dropin", Namespace: "e2e", UID: "uid-dropin",
		PidPerContainer: isCRIO(rt)})
	require.NoError(t, err)
	st, err := cri.PodStatus(ctx, id)
	require.NoError(t, err)
	itf, ok, err := harness.PodIface(st.NetnsPath, "net1")
	require.NoError(t, err)
	require.True(t, ok, "net1 exists")
	_, subnet, _ := net.ParseCIDR(sec.Subnet)
	require.Len(t, itf.Addrs, 1)
	assert.True(t, subnet.Contains(itf.Addrs[0].IP))

	require.NoError(t, cri.StopPod(ctx, id))
	require.NoError(t, cri.RemovePod(ctx, id))
	assert.Empty(t, sec.IPFilesOf(id), "IP released")
	assert.Empty(t, cfg.StateFilesOf(id), "record dropped")

	// A normal runtime shutdown ends the plugin without an error line.
	cleanupPods(t, rt.CRIAddress())
	closed = true
	require.NoError(t, rt.Close(context.Background()))
	if c, ok := rt.(*harness.CRIO); ok {
		assert.Empty(t, c.Leftovers(), "left behind by CRI-O")
	}

	// stdout/stderr are discarded by the runtime: the log file is the proof.
	testenv.Eventually(t, 15*time.Second, "nri-cni to log its stop", func() bool {
		return strings.Contains(cfg.Log(), "nri-cni stopped")
	})
	log := cfg.Log()
	assert.Contains(t, log, "pre-launched")
	assert.Contains(t, log, "configured by the runtime")
	assert.Contains(t, log, "network attached")
	assert.Contains(t, log, id)
	assert.NotContains(t, log, "level=error", "nothing logged as an error, shutdown included")
}
