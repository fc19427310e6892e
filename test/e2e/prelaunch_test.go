package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestPrelaunchedDropIn: the binary as <plugin_path>/10-nri-cni and its
// config as <plugin_config_path>/10-nri-cni.conf; containerd starts it.
func TestPrelaunchedDropIn(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sec, cfg, _ := pluginSetup(t, t.TempDir())

	// A containerd of its own: pre-launched plugins start with containerd.
	ctdDir, err := os.MkdirTemp("", "ctd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(ctdDir) })
	pluginDir, confDir := filepath.Join(ctdDir, "nri-plugins"), filepath.Join(ctdDir, "nri-conf.d")
	require.NoError(t, os.MkdirAll(pluginDir, 0o755))
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	data, err := os.ReadFile(world.bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(pluginDir, "10-nri-cni"), data, 0o755))
	require.NoError(t, cfg.Write(filepath.Join(confDir, "10-nri-cni.conf")))

	ctd, err := startContainerd(ctx, ctdDir)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s\ncontainerd log tail:\n%s", cfg.Log(), ctd.LogTail(40))
		}
		assert.NoError(t, ctd.Close(context.Background()))
	})
	require.NoError(t, ctd.WaitLog(ctx, harness.PrelaunchedSynced("10-nri-cni"), 1, 15*time.Second))

	cri := dialCRI(ctx, t, ctd.Address)
	defer cri.Close()
	cleanupPodsAt(t, ctd.Address)
	id, err := cri.RunPod(ctx, harness.PodSpec{Name: "dropin", Namespace: "e2e", UID: "uid-dropin"})
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

	// stdout/stderr are discarded by containerd: the log file is the proof.
	log := cfg.Log()
	assert.Contains(t, log, "pre-launched")
	assert.Contains(t, log, "configured by the runtime")
	assert.Contains(t, log, "network attached")
	assert.Contains(t, log, id)
}
