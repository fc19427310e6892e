package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// Fail-closed while nri-cni is down, with containerd's NRI default validator
// (containerd 2.2+): it checks required plugins when a container is created —
// not at RunPodSandbox — against the plugins connected at that moment.
const (
	requiredAnnotation = "required-plugins.noderesource.dev"
	tolerateAnnotation = "tolerate-missing-nri-plugins.noderesource.dev"
	// requiredErr is containerd's CreateContainer error while nri-cni is away.
	requiredErr = `required plugin "nri-cni" not present`
)

type requiredCase struct {
	name      string
	validator string            // TOML appended to containerd's config
	imports   []string          // containerd's config imports these (the node drop-in)
	asks      map[string]string // what a pod that wants networks carries besides nri-cni.io/networks
	// nodeWide: every pod's containers wait for nri-cni, except tolerated ones.
	nodeWide bool
}

// TestRequiredNRICNI: nri-cni required; nri-cni stopped: the pod sandbox
// starts (without net1) but its container is not created, with containerd's
// "required plugin" error; nri-cni started: the container is created and the
// pod has net1 before it starts. nri-cni runs with syncAttach off, so the
// attach can only come from its CreateContainer handler. Per pod (the node
// drop-in deploy/node/containerd/10-nri-cni.toml, imported as `nri-cni
// node-setup` sets a node up, and the annotation in the form deploy/base's
// admission policy adds) only pods that ask for networks wait; node-wide,
// every pod without the toleration annotation waits — nri-cni's own pod
// included.
func TestRequiredNRICNI(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []requiredCase{
		{name: "per-pod (deploy/node drop-in)", imports: []string{filepath.Join(harness.RepoRoot(), node.ContainerdDropInRepoPath)},
			asks: map[string]string{requiredAnnotation + "/pod": `["nri-cni"]`}},
		{name: "node-wide", nodeWide: true, validator: fmt.Sprintf("\n[%s]\n  enable = true\n  required_plugins = [\"nri-cni\"]\n"+
			"  tolerate_missing_plugins_annotation = %q\n", deploy.NRIValidatorTable, tolerateAnnotation)},
	} {
		t.Run(tc.name, func(t *testing.T) { testRequired(t, tc) })
	}
}

func testRequired(t *testing.T, tc requiredCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ctd := privateContainerd(ctx, t, func(o *harness.ContainerdOpts) { o.ExtraTOML, o.DropIns = "\n"+tc.validator, tc.imports })

	record := filepath.Join(dir, "calls.jsonl")
	sec, cfg, cfgPath := pluginSetup(t, dir, map[string]any{"type": "cni-recorder", "recordFile": record})
	cfg.PodSelection = true
	writeConfig(t, cfg, cfgPath, map[string]any{"requireAnnotation": true, "syncAttach": false})
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
	cleanupPodsAt(t, ctd.Address) // before nri-cni stops: it tears the pods down

	cri := dialCRI(ctx, t, ctd.Address)
	defer cri.Close()
	wants := map[string]string{"nri-cni.io/networks": sec.Name}
	for k, v := range tc.asks {
		wants[k] = v
	}
	adds := func(id string) int {
		n := 0
		for _, c := range testenv.ReadCalls(t, record) {
			if c.Cmd == "ADD" && c.ContainerID == id {
				n++
			}
		}
		return n
	}

	// nri-cni up: attached at RunPodSandbox; its container costs no CNI call.
	early := newRequiredPod(ctx, t, cri, "early", wants)
	early.create(ctx, t, cri, "net1")
	assert.Equal(t, 1, adds(early.id))

	// nri-cni down: sandboxes start, containers of pods that need it do not.
	closed := ctd.CountLog(`connection to plugin \"10-nri-cni\" closed`)
	require.NoError(t, plugin.Stop())
	plugin = nil
	require.NoError(t, ctd.WaitLog(ctx, `connection to plugin \"10-nri-cni\" closed`, closed+1, 30*time.Second))
	late := newRequiredPod(ctx, t, cri, "late", wants)
	assert.Nil(t, podNet1(t, late.netns), "no net1 while nri-cni is down")
	_, err = cri.CreateContainer(ctx, late.id, late.spec, harness.ContainerSpec{Name: "app"})
	require.ErrorContains(t, err, requiredErr)
	t.Logf("containerd's CreateContainer error: %v", err)
	plain := newRequiredPod(ctx, t, cri, "plain", nil)
	if tc.nodeWide {
		_, err = cri.CreateContainer(ctx, plain.id, plain.spec, harness.ContainerSpec{Name: "app"})
		require.ErrorContains(t, err, requiredErr, "node-wide: a pod without networks waits too")
		tolerated := newRequiredPod(ctx, t, cri, "tolerated", map[string]string{tolerateAnnotation: "true"})
		tolerated.create(ctx, t, cri, "")
	} else {
		plain.create(ctx, t, cri, "")
	}

	// nri-cni back (no resync attach): CreateContainer attaches the pod
	// before its container exists.
	plugin, err = harness.StartPlugin(ctx, ctd, world.bin, cfgPath, cfg)
	require.NoError(t, err)
	late.create(ctx, t, cri, "net1")
	assert.Equal(t, 1, adds(late.id), "one ADD")
	assert.Contains(t, cfg.Log(), "attached before the pod's first container")
	if tc.nodeWide {
		plain.create(ctx, t, cri, "")
	}
	assert.Equal(t, 0, adds(plain.id), "a pod that asks for nothing gets nothing")

	cleanupPods(t, ctd.Address)
	ids := []string{early.id, late.id, plain.id}
	assert.Empty(t, sec.IPFilesOf(ids...), "addresses released")
	assert.Empty(t, cfg.StateFilesOf(ids...), "records dropped")
	assert.Empty(t, cfg.CacheFilesOf(ids...), "cache entries dropped")
}

// writeConfig writes cfg plus keys the harness's config type lacks.
func writeConfig(t *testing.T, cfg harness.PluginConfig, path string, extra map[string]any) {
	t.Helper()
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	for k, v := range extra {
		m[k] = v
	}
	data, err = json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

type requiredPod struct {
	id, netns string
	spec      harness.PodSpec
}

func newRequiredPod(ctx context.Context, t *testing.T, cri *harness.CRI, name string, annotations map[string]string) requiredPod {
	t.Helper()
	spec := harness.PodSpec{Name: name, Namespace: "e2e", UID: harness.RandomName("uid-"), Annotations: annotations}
	id, err := cri.RunPod(ctx, spec)
	require.NoError(t, err, "the sandbox starts either way")
	st, err := cri.PodStatus(ctx, id)
	require.NoError(t, err)
	return requiredPod{id: id, netns: st.NetnsPath, spec: spec}
}

// create creates a container in the pod and starts it. ifname, if set, must
// be in the pod's netns before the container starts, and in the running
// container's.
func (p requiredPod) create(ctx context.Context, t *testing.T, cri *harness.CRI, ifname string) {
	t.Helper()
	id, err := cri.CreateContainer(ctx, p.id, p.spec, harness.ContainerSpec{Name: "app"})
	require.NoError(t, err)
	if ifname != "" {
		_, ok, err := harness.PodIface(p.netns, ifname)
		require.NoError(t, err)
		require.True(t, ok, "%s in the pod before its container starts", ifname)
	}
	require.NoError(t, cri.StartContainer(ctx, id))
	st, err := cri.ContainerStatus(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "CONTAINER_RUNNING", st.State)
	if ifname != "" {
		require.Positive(t, st.Pid)
		_, ok, err := harness.PodIface(fmt.Sprintf("/proc/%d/ns/net", st.Pid), ifname)
		require.NoError(t, err)
		assert.True(t, ok, "%s in the running container", ifname)
	}
}

// podNet1 is net1 in the netns at path (nil if absent).
func podNet1(t *testing.T, path string) *harness.Iface {
	t.Helper()
	itf, ok, err := harness.PodIface(path, "net1")
	require.NoError(t, err)
	if !ok {
		return nil
	}
	return &itf
}
