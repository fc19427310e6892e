package e2e

import (
	"context"
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

// TestFailedSandboxListedAfterRestartIsNotAttached reproduces what made the
// suite flaky on a busy machine, deterministically. When RunPodSandbox fails
// (here: nri-cni fails it) and containerd's own rollback then fails too (here:
// its primary network's DEL), containerd 2.4.2 keeps the sandbox — metadata and
// pinned netns — to be cleaned up by a later Stop/Remove from the kubelet.
// After a containerd restart it recovers it as NOTREADY with Pid 0 and lists it
// in NRI Synchronize, netns path included. nri-cni's resync must not attach it:
// that address would be held by a pod that never ran.
func TestFailedSandboxListedAfterRestartIsNotAttached(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	primaryFail := filepath.Join(dir, "fail-primary-del")
	require.NoError(t, os.WriteFile(primaryFail, nil, 0o644))
	ctd := privateContainerd(ctx, t, func(o *harness.ContainerdOpts) {
		o.ExtraCNIBinDirs = []string{world.recorderDir}
		o.PrimaryExtra = []map[string]any{{"type": "cni-recorder", "recordFile": filepath.Join(dir, "primary.jsonl"),
			"failOn": "DEL", "failWhile": primaryFail}}
	})

	secFail := filepath.Join(dir, "fail-secondary-add")
	require.NoError(t, os.WriteFile(secFail, nil, 0o644))
	secRecord := filepath.Join(dir, "secondary.jsonl")
	sec, cfg, cfgPath := pluginSetup(t, dir, map[string]any{"type": "cni-recorder", "recordFile": secRecord,
		"failOn": "ADD", "failWhile": secFail})
	plugin, err := harness.StartPlugin(ctx, ctd, world.bin, cfgPath, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s\ncontainerd log tail:\n%s", cfg.Log(), ctd.LogTail(40))
		}
		assert.NoError(t, plugin.Stop())
	})
	t.Cleanup(func() { // before nri-cni stops: heal containerd's DEL, then remove the pods
		_ = os.Remove(primaryFail)
		cleanupPods(t, ctd.Address)
	})

	cri := dialCRI(ctx, t, ctd.Address)
	defer cri.Close()
	_, err = cri.RunPod(ctx, harness.PodSpec{Name: "never-ran", Namespace: "e2e", UID: harness.RandomName("uid-")})
	require.Error(t, err, "nri-cni fails the pod")
	pods, err := cri.ListPods(ctx, owner(t))
	require.NoError(t, err)
	require.Len(t, pods, 1, "containerd kept the sandbox: its rollback failed")
	id := pods[0].GetId()
	st, err := cri.PodStatus(ctx, id)
	require.NoError(t, err)
	require.FileExists(t, st.NetnsPath, "and its pinned netns")
	assert.NotContains(t, ctd.LogTail(200), "closing plugin", "containerd kept nri-cni")

	// The secondary network works again; containerd restarts and lists the
	// kept sandbox to nri-cni (NOTREADY, Pid 0, netns pinned).
	require.NoError(t, os.Remove(secFail))
	synced := ctd.CountLog(harness.PluginSynced("10-nri-cni"))
	require.NoError(t, ctd.Restart(ctx))
	require.NoError(t, ctd.WaitLog(ctx, harness.PluginSynced("10-nri-cni"), synced+1, 30*time.Second))
	testenv.Eventually(t, 30*time.Second, "nri-cni's resync after the restart", func() bool {
		return strings.Count(cfg.Log(), "resync with the runtime done") >= 2
	})
	assert.Contains(t, cfg.Log(), "notRunning=1", "the resync saw it and left it alone")
	adds := 0
	for _, c := range testenv.ReadCalls(t, secRecord) {
		if c.Cmd == "ADD" && c.ContainerID == id {
			adds++
		}
	}
	assert.Equal(t, 1, adds, "only the failed ADD of RunPodSandbox; none from the resync")
	assert.Empty(t, sec.IPFilesOf(id), "no address held for a pod that never ran")
	assert.Empty(t, cfg.StateFilesOf(id), "no record")
}
