package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// hookSeen is one line of the dump hook: a container's OCI state and the
// annotations of its bundle's config.json, as nri-cni's hook reads them.
type hookSeen struct {
	Tag    string            `json:"tag"` // which hooks.d entry ran it
	ID     string            `json:"id"`
	Status string            `json:"status"`
	Ann    map[string]string `json:"ann"`
}

// crioHooks is a private CRI-O whose hooks.d runs the shipped nri-cni entry
// (paths pointed at the test's) and a dump hook, twice: always, and with
// the README's old "sandbox containers only" filter.
type crioHooks struct {
	t    *testing.T
	ctx  context.Context
	crio *harness.CRIO
	cri  *harness.CRI
	dump string
}

func startCRIOHooks(ctx context.Context, t *testing.T, dir, cfgPath string) *crioHooks {
	t.Helper()
	jq, err := exec.LookPath("jq")
	require.NoError(t, err)
	hooksDir := filepath.Join(dir, "hooks.d")
	require.NoError(t, os.MkdirAll(hooksDir, 0o755))
	e := &crioHooks{t: t, ctx: ctx, dump: filepath.Join(dir, "hooks-seen.jsonl")}
	script := filepath.Join(dir, "dump-hook")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
st=$(cat)
b=$(printf '%%s' "$st" | %[1]s -r .bundle)
exec %[1]s -c --arg tag "$1" --argjson st "$st" '{tag: $tag, id: $st.id, status: $st.status, ann: .annotations}' "$b/config.json" >>%[2]q
`, jq, e.dump)), 0o755))
	entry := func(name string, hook map[string]any, when map[string]any) {
		data, err := json.Marshal(map[string]any{"version": "1.0.0", "hook": hook, "when": when,
			"stages": []string{"createRuntime", "poststop"}})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(hooksDir, name), data, 0o644))
	}
	entry("10-dump.json", map[string]any{"path": script, "args": []string{"dump-hook", "always"}}, map[string]any{"always": true})
	entry("30-dump-sandbox-only.json", map[string]any{"path": script, "args": []string{"dump-hook", "sandbox-only"}},
		map[string]any{"annotations": map[string]string{`^io\.kubernetes\.cri-o\.ContainerType$`: "^sandbox$"}})
	// The shipped hooks.d file, as an admin installs it.
	raw, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "hooks.d", "nri-cni.json"))
	require.NoError(t, err)
	var shipped map[string]any
	require.NoError(t, json.Unmarshal(raw, &shipped))
	hook := shipped["hook"].(map[string]any)
	hook["path"], hook["args"] = world.bin, []string{"nri-cni", "hook", "--config", cfgPath}
	data, err := json.Marshal(shipped)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(hooksDir, "20-nri-cni.json"), data, 0o644))

	crioDir, err := os.MkdirTemp("", "chk") // short: unix socket paths
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(crioDir) })
	// Infra container kept: CRI-O still runs no hooks.d entry for it.
	e.crio, err = harness.StartCRIO(ctx, harness.CRIOOpts{Dir: crioDir, Tools: world.tools, CRIOBinDir: world.tools.CRIODir,
		PauseTar: world.pauseTar, HooksDir: hooksDir})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("crio log tail:\n%s", e.crio.LogTail(60))
		}
		assert.NoError(t, e.crio.Close(context.Background()))
		assert.Empty(t, e.crio.Leftovers(), "left behind by the test's CRI-O")
	})
	e.cri = dialCRI(ctx, t, e.crio.Address)
	t.Cleanup(func() { e.cri.Close() })
	return e
}

// kubeletPod is a pod as the kubelet sends it: its labels carry the pod's
// name, namespace and uid (set over any pod label of those keys).
func kubeletPod(namespace string, annotations map[string]string) harness.PodSpec {
	p := harness.PodSpec{Name: harness.RandomName("pod-"), Namespace: namespace, UID: harness.RandomName("uid-"),
		Annotations: annotations, PidPerContainer: true}
	p.Labels = map[string]string{"io.kubernetes.pod.name": p.Name, "io.kubernetes.pod.namespace": p.Namespace,
		"io.kubernetes.pod.uid": p.UID}
	return p
}

// runPodWithContainer runs the pod and creates and starts one container in
// it, labelled as the kubelet labels containers; createErr is
// CreateContainer's error.
func (e *crioHooks) runPodWithContainer(pod harness.PodSpec) (podID, ctrID string, createErr error) {
	e.t.Helper()
	podID, err := e.cri.RunPod(e.ctx, pod)
	require.NoError(e.t, err)
	labels := map[string]string{"io.kubernetes.container.name": "app"}
	for _, k := range []string{"io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid"} {
		labels[k] = pod.Labels[k]
	}
	resp, err := e.cri.Runtime().CreateContainer(e.ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Image:    &runtimeapi.ImageSpec{Image: harness.PauseImage, UserSpecifiedImage: harness.PauseImage},
			Labels:   labels,
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER},
			}},
		},
		SandboxConfig: e.cri.SandboxConfig(pod),
	})
	if err != nil {
		return podID, "", err
	}
	require.NoError(e.t, e.cri.StartContainer(e.ctx, resp.ContainerId))
	return podID, resp.ContainerId, nil
}

// net1 returns net1's address in the pod's netns (nil: no net1).
func (e *crioHooks) net1(podID string) *net.IPNet {
	e.t.Helper()
	st, err := e.cri.PodStatus(e.ctx, podID)
	require.NoError(e.t, err)
	itf, ok, err := harness.PodIface(st.NetnsPath, "net1")
	require.NoError(e.t, err)
	if !ok {
		return nil
	}
	require.Len(e.t, itf.Addrs, 1)
	return &itf.Addrs[0]
}

func (e *crioHooks) seen() []hookSeen {
	e.t.Helper()
	f, err := os.Open(e.dump)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(e.t, err)
	defer f.Close()
	var out []hookSeen
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s hookSeen
		require.NoError(e.t, json.Unmarshal(sc.Bytes(), &s), "%s", sc.Text())
		out = append(out, s)
	}
	require.NoError(e.t, sc.Err())
	return out
}

// logSeen writes the annotations the hooks saw at createRuntime to the test
// log, sorted, skipping the long JSON copies CRI-O keeps of its inputs.
func (e *crioHooks) logSeen(names map[string]string) {
	for _, s := range e.seen() {
		if s.Status != "creating" || s.Tag != "always" {
			continue
		}
		keys := make([]string, 0, len(s.Ann))
		for k := range s.Ann {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			if strings.HasPrefix(s.Ann[k], "{") || strings.HasPrefix(s.Ann[k], "[") || strings.HasPrefix(s.Ann[k], "/") {
				continue
			}
			fmt.Fprintf(&b, "\n    %s=%s", k, s.Ann[k])
		}
		e.t.Logf("hook saw %s (%.12s) at createRuntime:%s", names[s.ID], s.ID, b.String())
	}
}

// TestCRIOHookIdentity: hook mode under a real CRI-O 1.36.3 with hooks.d and
// nri.conf's namespaces.include: [trusted]. A pod in "tenant" that annotates
// itself as "trusted" (containerd's sandbox keys, CRI-O's own SandboxID and
// Namespace, the kubelet's label keys) gets no network; a pod really in
// "trusted" gets net1 with its real name, namespace, uid and sandbox id in
// CNI_ARGS, also when it claims containerd's keys. Also shown: CRI-O
// runs hooks.d entries for app containers only (not for the kept infra
// container), matching `when` against the CRI annotations, not the spec.
// nri-cni runs as a hook only (no NRI plugin connects to this CRI-O).
func TestCRIOHookIdentity(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	dir := t.TempDir()
	record := filepath.Join(dir, "calls.jsonl")
	sec, cfg, cfgPath := pluginSetup(t, dir, map[string]any{"type": "cni-recorder", "recordFile": record})
	writeConfig(t, cfg, cfgPath, map[string]any{"namespaces": map[string]any{"include": []string{"trusted"}}})
	e := startCRIOHooks(ctx, t, dir, cfgPath)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s", cfg.Log())
		}
	})
	plugins, err := os.ReadDir(e.crio.NRIPluginDir)
	require.NoError(t, err)
	require.Empty(t, plugins, "no NRI plugin: nri-cni attaches from hooks.d only")

	// (a) A tenant's pod naming itself "trusted".
	hostilePod := kubeletPod("tenant", map[string]string{
		"io.kubernetes.cri.sandbox-namespace": "trusted", "io.kubernetes.cri.sandbox-name": "victim",
		"io.kubernetes.cri.sandbox-uid": "victim-uid", "io.kubernetes.cri.sandbox-id": "forged-sandbox",
		"io.kubernetes.cri-o.SandboxID": "forged-sandbox", "io.kubernetes.cri-o.Namespace": "trusted",
		"io.kubernetes.pod.namespace": "trusted", "io.kubernetes.pod.name": "victim",
	})
	hostileID, hostileCtr, err := e.runPodWithContainer(hostilePod)
	require.NoError(t, err, "the tenant's container starts, without nri-cni's networks")
	// (b) A pod really in "trusted".
	trustedPod := kubeletPod("trusted", nil)
	trustedID, trustedCtr, err := e.runPodWithContainer(trustedPod)
	require.NoError(t, err)
	// (c) A pod in "trusted" that claims containerd's keys: CRI-O drops
	// io.kubernetes.cri.container-type from pod annotations (a runtime
	// handler's allowed_annotations must list it), the rest is ignored.
	otherPod := kubeletPod("trusted", map[string]string{"io.kubernetes.cri.container-type": "sandbox",
		"io.kubernetes.cri.sandbox-name": "victim", "io.kubernetes.cri.sandbox-id": "forged-sandbox"})
	otherID, otherCtr, err := e.runPodWithContainer(otherPod)
	require.NoError(t, err)
	e.logSeen(map[string]string{hostileCtr: "tenant's container (a)", trustedCtr: "trusted container (b)", otherCtr: "container (c)"})

	assert.Nil(t, e.net1(hostileID), "no net1 for the tenant's pod")
	_, subnet, _ := net.ParseCIDR(sec.Subnet)
	for _, id := range []string{trustedID, otherID} {
		ip := e.net1(id)
		require.NotNil(t, ip, "net1 for the trusted pod %.12s", id)
		assert.True(t, subnet.Contains(ip.IP), "%s in %s", ip, sec.Subnet)
	}

	calls := testenv.ReadCalls(t, record)
	adds := map[string]string{} // container id -> CNI_ARGS
	for _, c := range calls {
		if c.Cmd == "ADD" {
			adds[c.ContainerID] = c.Args
		}
	}
	args := func(p harness.PodSpec, sandbox string) string {
		return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=trusted;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
			p.Name, sandbox, p.UID)
	}
	// Keyed by the container id (the hook), not the sandbox id (NRI).
	assert.Equal(t, map[string]string{trustedCtr: args(trustedPod, trustedID), otherCtr: args(otherPod, otherID)}, adds,
		"ADDs of the trusted pods only, under their own names: %+v", calls)

	// What CRI-O wrote, on the real runtime.
	byID := map[string]hookSeen{}
	for _, s := range e.seen() {
		assert.NotEqual(t, "sandbox-only", s.Tag, "the sandbox-only entry never matches under CRI-O")
		for _, sb := range []string{hostileID, trustedID, otherID} {
			assert.NotEqual(t, sb, s.ID, "CRI-O runs no hooks.d entry for the infra container")
		}
		if s.Status == "creating" {
			byID[s.ID] = s
		}
	}
	h, ok := byID[hostileCtr]
	require.True(t, ok, "the hook ran for the tenant's container")
	assert.Equal(t, "container", h.Ann["io.kubernetes.cri-o.ContainerType"])
	assert.Equal(t, hostileID, h.Ann["io.kubernetes.cri-o.SandboxID"], "CRI-O's SandboxID overrides the pod's")
	assert.Equal(t, "tenant", h.Ann["io.kubernetes.pod.namespace"], "the kubelet's label overrides the pod's annotation")
	assert.Equal(t, "trusted", h.Ann["io.kubernetes.cri.sandbox-namespace"], "containerd's key: the pod's, copied as is")
	assert.Equal(t, "trusted", h.Ann["io.kubernetes.cri-o.Namespace"], "not set by CRI-O on app containers: the pod's")
	o, ok := byID[otherCtr]
	require.True(t, ok, "the hook ran for container (c)")
	assert.NotContains(t, o.Ann, "io.kubernetes.cri.container-type", "CRI-O filtered it out of the pod's annotations")
	assert.Equal(t, "victim", o.Ann["io.kubernetes.cri.sandbox-name"])

	// Stop everything: poststop releases the trusted pod's network.
	for _, id := range []string{hostileCtr, trustedCtr, otherCtr} {
		_, err := e.cri.Runtime().StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
		require.NoError(t, err)
	}
	for _, id := range []string{hostileID, trustedID, otherID} {
		require.NoError(t, e.cri.StopPod(ctx, id))
		require.NoError(t, e.cri.RemovePod(ctx, id))
	}
	var dels []string
	for _, c := range testenv.ReadCalls(t, record) {
		if c.Cmd == "DEL" {
			dels = append(dels, c.ContainerID)
		}
	}
	assert.ElementsMatch(t, []string{trustedCtr, otherCtr}, dels, "one DEL per attached container, at its poststop")
	assert.Empty(t, sec.IPFiles(), "IP released")
	assert.Empty(t, cfg.StateFiles(), "records gone")
	assert.NotContains(t, cfg.Log(), "level=error")
	t.Logf("the test took %s", time.Since(start).Round(time.Millisecond))
}
