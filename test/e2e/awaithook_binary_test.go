package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestAwaitHookBinaryMissing: with the await hook on and its binary
// (failClosed.hookPath) missing on the node, nri-cni is not ready and says
// why (/readyz, healthz --ready, status, the metric), and hands out no hook
// the runtime could not run: a pod whose (slow) attach is still running
// gets its container once attached (CreateContainer waits for it or is
// refused and retried), never a failed start; the container runs with net1
// (its command exits 1 at once without it). Once the binary is there (not
// executable first), nri-cni is ready. Real containerd 2.4.2 with
// deploy/node's drop-in.
func TestAwaitHookBinaryMissing(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ctd := privateContainerd(ctx, t, func(o *harness.ContainerdOpts) {
		o.DropIns = []string{filepath.Join(harness.RepoRoot(), node.ContainerdDropInRepoPath)}
	})
	sec, cfg, cfgPath := pluginSetup(t, dir, map[string]any{"type": "cni-recorder", "recordFile": filepath.Join(dir, "calls.jsonl"), "sleep": "3s"})
	cfg.PodSelection = true
	hookBin := filepath.Join(dir, "hook-bin", "nri-cni") // absent
	writeConfig(t, cfg, cfgPath, map[string]any{"requireAnnotation": true, "backgroundAttach": true, "cniTimeout": "10s",
		"failClosed": map[string]any{"hookSocket": filepath.Join(ctd.Dir, "await.sock"), "hookPath": hookBin, "hookTimeout": "60s"}})
	addr := freeLoopbackAddr(t)
	plugin, err := harness.StartPlugin(ctx, ctd, world.bin, cfgPath, cfg, "--metrics-addr", addr)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s\ncontainerd log tail:\n%s", cfg.Log(), ctd.LogTail(40))
		}
		assert.NoError(t, plugin.Stop())
	})
	missing := hookBin + " is missing on the node (failClosed.hookPath)"
	testenv.Eventually(t, time.Minute, "nri-cni serving, and not ready for the hook", func() bool {
		code, body := httpGet(t, "http://"+addr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "serving containerd") && strings.Contains(body, missing)
	})
	out, err := exec.Command(world.bin, "healthz", "--ready", "--addr", addr).CombinedOutput()
	assert.Error(t, err, "healthz --ready fails")
	assert.Contains(t, string(out), missing)
	out, err = exec.Command(world.bin, "status", "--config", cfgPath).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "NOT RUNNABLE: the await hook cannot run: "+missing)
	_, body := httpGet(t, "http://"+addr+"/metrics")
	assert.Contains(t, body, `nri_cni_await_hook_runnable{path="`+hookBin+`"} 0`)

	cleanupPodsAt(t, ctd.Address)
	cri := dialCRI(ctx, t, ctd.Address)
	defer cri.Close()
	pod := newRequiredPod(ctx, t, cri, "nohook", map[string]string{"nri-cni.io/networks": sec.Name,
		"required-plugins.noderesource.dev/pod": `["nri-cni"]`})
	var ctrID string
	testenv.Eventually(t, time.Minute, "the container created once its pod is attached", func() bool {
		ctrID, err = cri.CreateContainer(ctx, pod.id, pod.spec, harness.ContainerSpec{Name: "app",
			Command: []string{"/pause", "--require-iface", "net1"}})
		if err != nil {
			assert.Contains(t, err.Error(), "attach", "refused only while the pod's attach runs")
		}
		return err == nil
	})
	require.NoError(t, cri.StartContainer(ctx, ctrID), "no hook that cannot run: no failed start")
	testenv.Eventually(t, 10*time.Second, "the container running (its command found net1)", func() bool {
		st, err := cri.ContainerStatus(ctx, ctrID)
		return err == nil && st.State == "CONTAINER_RUNNING"
	})
	require.NotNil(t, podNet1(t, pod.netns))

	require.NoError(t, os.MkdirAll(filepath.Dir(hookBin), 0o755))
	data, err := os.ReadFile(world.bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(hookBin, data, 0o644))
	code, body := httpGet(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, hookBin+" is not executable (mode 0644) (failClosed.hookPath)")
	require.NoError(t, os.Chmod(hookBin, 0o755))
	code, body = httpGet(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusOK, code, body)

	cleanupPods(t, ctd.Address)
	assert.Empty(t, sec.IPFilesOf(pod.id), "addresses released")
}
