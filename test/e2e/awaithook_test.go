package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestAwaitHookSurvivesACrash: containerd 2.4.2 counts an NRI plugin
// present for its validator when it sends it CreateContainer, not when the
// plugin answers; nri-cni killed while it waited there for a pod's attach
// would let containerd create the container without the pod's networks.
// With the await hook (failClosed.hookSocket), CreateContainer answers at
// once and the container's start waits in an OCI hook instead: nri-cni is
// SIGKILLed while the pod's (slow) attach runs; the container does not
// start; the restarted nri-cni finishes the attach (its resync) and the
// container starts with net1 — its command exits 1 at once without it.
func TestAwaitHookSurvivesACrash(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ctd := privateContainerd(ctx, t, func(o *harness.ContainerdOpts) {
		o.DropIns = []string{filepath.Join(harness.RepoRoot(), node.ContainerdDropInRepoPath)}
	})

	record := filepath.Join(dir, "calls.jsonl")
	sec, cfg, cfgPath := pluginSetup(t, dir, map[string]any{"type": "cni-recorder", "recordFile": record, "sleep": "3s"})
	cfg.PodSelection = true
	socket := filepath.Join(ctd.Dir, "await.sock")
	writeConfig(t, cfg, cfgPath, map[string]any{"requireAnnotation": true, "backgroundAttach": true, "cniTimeout": "10s",
		"failClosed": map[string]any{"hookSocket": socket, "hookPath": world.bin, "hookTimeout": "60s"}})
	plugin, err := harness.StartPlugin(ctx, ctd, world.bin, cfgPath, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s\ncontainerd log tail:\n%s", cfg.Log(), ctd.LogTail(40))
		}
		if plugin != nil {
			assert.NoError(t, plugin.Stop())
		}
	})
	cleanupPodsAt(t, ctd.Address)
	cri := dialCRI(ctx, t, ctd.Address)
	defer cri.Close()

	pod := newRequiredPod(ctx, t, cri, "slow", map[string]string{"nri-cni.io/networks": sec.Name,
		"required-plugins.noderesource.dev/pod": `["nri-cni"]`})
	start := time.Now()
	ctrID, err := cri.CreateContainer(ctx, pod.id, pod.spec, harness.ContainerSpec{Name: "app",
		Command: []string{"/pause", "--require-iface", "net1"}})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "CreateContainer does not wait for the 3 s attach")
	started := make(chan error, 1)
	go func() { started <- cri.StartContainer(ctx, ctrID) }()

	time.Sleep(time.Second) // the attach's ADD runs; the container waits in its hook
	plugin.Kill()
	plugin = nil
	select {
	case err := <-started:
		t.Fatalf("the container started while its pod's attach was cut short: %v", err)
	case <-time.After(2 * time.Second):
	}
	plugin, err = harness.StartPlugin(ctx, ctd, world.bin, cfgPath, cfg)
	require.NoError(t, err)
	select {
	case err := <-started:
		require.NoError(t, err, "started once the restarted nri-cni attached the pod")
	case <-ctx.Done():
		t.Fatal("the container never started")
	}
	testenv.Eventually(t, 10*time.Second, "the container running (its command found net1)", func() bool {
		st, err := cri.ContainerStatus(ctx, ctrID)
		return err == nil && st.State == "CONTAINER_RUNNING"
	})
	require.NotNil(t, podNet1(t, pod.netns))
	assert.Contains(t, cfg.Log(), "an earlier attach was cut short or not rolled back: undoing it, then attaching again")

	cleanupPods(t, ctd.Address)
	assert.Empty(t, sec.IPFilesOf(pod.id), "addresses released")
	assert.Empty(t, cfg.StateFilesOf(pod.id), "records dropped")
	assert.Empty(t, cfg.CacheFilesOf(pod.id), "cache entries dropped")
}
