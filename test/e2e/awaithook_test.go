package e2e

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// awaitSetup is a containerd set up as deploy/node sets it up (NRI's
// default validator on) and nri-cni's config for it: backgroundAttach, the
// await hook, and a network whose plugin takes 3 s; nri-cni started.
func awaitSetup(ctx context.Context, t *testing.T) (*harness.Containerd, harness.Secondary, harness.PluginConfig, string, *harness.Plugin) {
	t.Helper()
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
	return ctd, sec, cfg, cfgPath, plugin
}

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
	ctd, sec, cfg, cfgPath, plugin := awaitSetup(ctx, t)
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

// TestCreateContainerCutShortIsRefused: containerd 2.4.2 (NRI v0.12.3)
// closes a plugin that overruns CreateContainer's deadline (or dies during
// it) and goes on without its answer, and its default validator still
// counts the plugin present: the container would be created without the
// await hook, for a pod whose attach is not done. nri-cni, subscribed as a
// validator too, is then asked to validate after it was closed; the call
// fails and containerd refuses the container. Here nri-cni is frozen
// (SIGSTOP) with the pod's attach running, so CreateContainer overruns:
// the container is refused, not created; once nri-cni runs again it
// reconnects, finishes the attach, and the kubelet-like retry gets a
// container that starts with net1.
func TestCreateContainerCutShortIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ctd, sec, cfg, _, plugin := awaitSetup(ctx, t)
	t.Cleanup(func() { assert.NoError(t, plugin.Stop()) })
	assertCutShortRefused(ctx, t, ctd.Address, ctd.LogTail, sec, cfg, plugin)
	assert.Contains(t, ctd.LogTail(400), "closing plugin 10-nri-cni", "containerd closed nri-cni for the overrun")
}

// TestCreateContainerCutShortIsRefusedCRIO: the same on CRI-O 1.36.3, which
// vendors the same NRI (v0.12.3) with the same default validator (set up
// by deploy/node's drop-in).
func TestCreateContainerCutShortIsRefusedCRIO(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := crioWithNodeDropIn(ctx, t)
	work := t.TempDir()
	sec, cfg, cfgPath := pluginSetup(t, work, map[string]any{"type": "cni-recorder", "recordFile": filepath.Join(work, "calls.jsonl"), "sleep": "3s"})
	cfg.PodSelection = true
	writeConfig(t, cfg, cfgPath, map[string]any{"requireAnnotation": true, "backgroundAttach": true, "cniTimeout": "10s",
		"failClosed": map[string]any{"hookSocket": filepath.Join(work, "await.sock"), "hookPath": world.bin, "hookTimeout": "60s"}})
	plugin, err := harness.StartPlugin(ctx, c, world.bin, cfgPath, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, plugin.Stop()) })
	assertCutShortRefused(ctx, t, c.Address, c.LogTail, sec, cfg, plugin)
}

// assertCutShortRefused: nri-cni (subscribed as a validator) is frozen
// (SIGSTOP) while a pod's attach runs, and the pod's container is asked
// for: the runtime closes nri-cni for overrunning CreateContainer, its own
// validation then fails, and the container is refused, not created without
// the await hook. Once nri-cni runs again it reconnects and finishes the
// attach, and the retried container (as the kubelet retries it) starts
// with net1 — its command exits 1 at once without it.
func assertCutShortRefused(ctx context.Context, t *testing.T, address string, runtimeLog func(int) string,
	sec harness.Secondary, cfg harness.PluginConfig, plugin *harness.Plugin) {
	t.Helper()
	require.Contains(t, cfg.Log(), "validator=true", "nri-cni subscribed as a validator")
	frozen := false
	t.Cleanup(func() {
		if frozen {
			_ = syscall.Kill(plugin.Pid(), syscall.SIGCONT)
		}
		if t.Failed() {
			t.Logf("nri-cni log:\n%s\nruntime log tail:\n%s", cfg.Log(), runtimeLog(60))
		}
	})
	cleanupPodsAt(t, address)
	cri := dialCRI(ctx, t, address)
	defer cri.Close()

	pod := newRequiredPod(ctx, t, cri, "cut", map[string]string{"nri-cni.io/networks": sec.Name,
		requiredAnnotation + "/pod": `["nri-cni"]`})
	ctrSpec := harness.ContainerSpec{Name: "app", Command: []string{"/pause", "--require-iface", "net1"}}
	require.NoError(t, syscall.Kill(plugin.Pid(), syscall.SIGSTOP))
	frozen = true
	_, err := cri.CreateContainer(ctx, pod.id, pod.spec, ctrSpec)
	require.Error(t, err, "the runtime went on without nri-cni's answer and created the container")
	assert.Contains(t, err.Error(), "validator plugin 10-nri-cni failed")
	t.Logf("refused while nri-cni was frozen: %v", err)
	require.NoError(t, syscall.Kill(plugin.Pid(), syscall.SIGCONT))
	frozen = false
	var ctrID string
	testenv.Eventually(t, time.Minute, "the retried container created once nri-cni is back", func() bool {
		ctrID, err = cri.CreateContainer(ctx, pod.id, pod.spec, ctrSpec)
		return err == nil
	})
	require.NoError(t, cri.StartContainer(ctx, ctrID))
	testenv.Eventually(t, 10*time.Second, "the container running (its command found net1)", func() bool {
		st, err := cri.ContainerStatus(ctx, ctrID)
		return err == nil && st.State == "CONTAINER_RUNNING"
	})

	cleanupPods(t, address)
	assert.Empty(t, sec.IPFilesOf(pod.id), "addresses released")
	assert.Empty(t, cfg.StateFilesOf(pod.id), "records dropped")
}
