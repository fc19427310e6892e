package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// hookEnv is nri-cni in hook mode with a bridge network, run by a real
// runc 1.5.2 with a private state root.
type hookEnv struct {
	t        *testing.T
	dir      string
	runc     string
	runcRoot string
	bin      string
	cfgPath  string
	cfg      harness.PluginConfig
	net      harness.Secondary
}

func newHookEnv(t *testing.T, recorder map[string]any) *hookEnv {
	testenv.RequireRoot(t)
	tools, err := harness.EnsureContainerdTools()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "nch")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &hookEnv{t: t, dir: dir, runc: filepath.Join(tools.RuncDir, "runc"), runcRoot: filepath.Join(dir, "runc")}
	e.bin, err = harness.GoBuild(dir, "./cmd/nri-cni", "nri-cni")
	require.NoError(t, err)
	e.net = harness.NewSecondary(dir)
	if recorder != nil {
		rec := map[string]any{"type": "cni-recorder", "recordFile": filepath.Join(dir, "calls.jsonl")}
		for k, v := range recorder {
			rec[k] = v
		}
		e.net.Extra = []map[string]any{rec}
	}
	t.Cleanup(e.net.DeleteBridge)
	e.cfg, err = harness.NewPluginConfig(dir, tools, e.net, recorderDir)
	require.NoError(t, err)
	e.cfgPath = filepath.Join(dir, "nri.conf")
	require.NoError(t, e.cfg.Write(e.cfgPath))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s", e.cfg.Log())
		}
	})
	return e
}

// bundle makes a busybox bundle running args, with nri-cni's hooks.
func (e *hookEnv) bundle(name string, args ...string) string {
	return testenv.BusyboxBundle(e.t, e.runc, filepath.Join(e.dir, name), args, testenv.NRICNIHooks(e.bin, e.cfgPath), nil)
}

// runcCmd runs runc with the private root; the container is force-deleted
// at cleanup.
func (e *hookEnv) runcCmd(id string, args ...string) *exec.Cmd {
	e.t.Cleanup(func() { _ = exec.Command(e.runc, "--root", e.runcRoot, "delete", "--force", id).Run() })
	return exec.Command(e.runc, append([]string{"--root", e.runcRoot}, args...)...)
}

func (e *hookEnv) assertNoLeaks() {
	e.t.Helper()
	assert.Empty(e.t, e.net.IPFiles(), "IP files")
	// After poststop's empty-netns DEL, the host-side veth goes when the
	// kernel finishes destroying the dead container's netns (asynchronously).
	testenv.Eventually(e.t, 5*time.Second, "the veth to go with the container's netns", func() bool {
		ports, err := harness.BridgePorts(e.net.Bridge)
		return err == nil && ports == 0
	})
	assert.Empty(e.t, e.cfg.CacheFiles(), "cache entries")
	assert.Empty(e.t, e.cfg.StateFiles(), "records")
}

func TestRuncContainerGetsNet1AndReleasesIt(t *testing.T) {
	e := newHookEnv(t, nil)
	id := harness.RandomName("c")
	b := e.bundle("b1", "sh", "-c", "ip -4 addr show dev net1")
	var stdout, stderr bytes.Buffer
	cmd := e.runcCmd(id, "run", "--bundle", b, id)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "runc run: %s", stderr.String())

	m := regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/24`).FindStringSubmatch(stdout.String())
	require.NotNil(t, m, "the container sees net1 with an address:\n%s", stdout.String())
	_, subnet, _ := net.ParseCIDR(e.net.Subnet)
	assert.True(t, subnet.Contains(net.ParseIP(m[1])), "%s in %s", m[1], e.net.Subnet)
	// runc run deletes the container on exit: poststop ran.
	e.assertNoLeaks()
	assert.Contains(t, e.cfg.Log(), "network attached")
}

func TestRuncFailingChainFailsTheContainer(t *testing.T) {
	e := newHookEnv(t, map[string]any{"failOn": "ADD", "failMsg": "vlan 42 exhausted"})
	id := harness.RandomName("c")
	b := e.bundle("b1", "echo", "should not run")
	var out bytes.Buffer
	cmd := e.runcCmd(id, "run", "--bundle", b, id)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.Error(t, cmd.Run())
	assert.Contains(t, out.String(), "vlan 42 exhausted", "runc shows the hook's message")
	assert.Contains(t, out.String(), "container "+id)
	assert.Contains(t, out.String(), e.net.Name)
	assert.NotContains(t, out.String(), "should not run")
	e.assertNoLeaks()
}

// hook runs `nri-cni hook STAGE` by hand with the given state.
func (e *hookEnv) hook(stage string, st specs.State) (string, error) {
	data, _ := json.Marshal(st)
	cmd := exec.Command(e.bin, "hook", "--config", e.cfgPath, stage)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestHookRepeatedCreateAndStrayPoststop(t *testing.T) {
	e := newHookEnv(t, nil)
	n := testenv.NewNetNS(t)
	pid := testenv.SleepIn(t, n.Path())
	b := testenv.BusyboxBundle(t, e.runc, filepath.Join(e.dir, "b"), []string{"true"}, nil, func(s *specs.Spec) {
		for i, ns := range s.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = n.Path()
			}
		}
	})
	st := specs.State{Version: specs.Version, ID: harness.RandomName("c"), Status: specs.StateCreating, Pid: pid, Bundle: b}

	out, err := e.hook("poststop", specs.State{ID: "never-seen", Bundle: b})
	require.NoError(t, err, "poststop without any record: %s", out)
	for i := 0; i < 2; i++ {
		out, err := e.hook("createRuntime", st)
		require.NoError(t, err, out)
	}
	assert.Len(t, e.net.IPFiles(), 1, "one allocation for a repeated createRuntime")
	itf, ok, err := harness.PodIface(n.Path(), "net1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Len(t, itf.Addrs, 1)

	st.Pid = 0
	out, err = e.hook("poststop", st)
	require.NoError(t, err, out)
	e.assertNoLeaks()
}

func TestGCCleansUpAKilledContainer(t *testing.T) {
	e := newHookEnv(t, nil)
	id := harness.RandomName("c")
	b := e.bundle("b1", "sleep", "600")
	// Detached: the container keeps its stdio, so give it files, not pipes
	// (a pipe would never reach EOF while the container lives).
	logf, err := os.Create(filepath.Join(e.dir, "runc-run.log"))
	require.NoError(t, err)
	defer logf.Close()
	cmd := e.runcCmd(id, "run", "--detach", "--bundle", b, id)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	out, _ := os.ReadFile(logf.Name())
	require.NoError(t, err, "runc run -d: %s", out)
	require.Len(t, e.net.IPFiles(), 1)

	stateOut, err := exec.Command(e.runc, "--root", e.runcRoot, "state", id).Output()
	require.NoError(t, err)
	var st struct{ Pid int }
	require.NoError(t, json.Unmarshal(stateOut, &st))
	require.NoError(t, syscall.Kill(st.Pid, syscall.SIGKILL)) // poststop will not run
	testenv.Eventually(t, 5*time.Second, "the container to die", func() bool {
		return !testenv.Exists(fmt.Sprintf("/proc/%d", st.Pid))
	})
	require.Len(t, e.cfg.StateFiles(), 1, "the record is still there")

	gcOut, err := exec.Command(e.bin, "gc", "--config", e.cfgPath).CombinedOutput()
	require.NoError(t, err, "%s", gcOut)
	assert.Contains(t, string(gcOut), "1 stale torn down")
	e.assertNoLeaks()

	// runc delete runs the (late) poststop: nothing left to do, no error.
	del, err := exec.Command(e.runc, "--root", e.runcRoot, "delete", id).CombinedOutput()
	require.NoError(t, err, "%s", del)
	assert.False(t, strings.Contains(e.cfg.Log(), "level=error"), "no errors logged:\n%s", e.cfg.Log())
}

// hooksD is the hooks.d 1.0.0 schema (podman, CRI-O, NRI's hook-injector).
type hooksD struct {
	Version string     `json:"version"`
	Hook    specs.Hook `json:"hook"`
	When    struct {
		Always      *bool             `json:"always"`
		Annotations map[string]string `json:"annotations"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

// shippedHooks reads hooks.d/NAME and applies it as hooks.d clients do (the
// same hook, same args, for every listed stage), with only the binary and
// config paths pointed at the test's.
func (e *hookEnv) shippedHooks(name string) (*specs.Hooks, hooksD) {
	e.t.Helper()
	raw, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "hooks.d", name))
	require.NoError(e.t, err)
	var hd hooksD
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(e.t, dec.Decode(&hd))
	h := hd.Hook
	h.Path = e.bin
	h.Args = []string{"nri-cni", "hook", "--config", e.cfgPath}
	hooks := &specs.Hooks{}
	for _, s := range hd.Stages {
		switch s {
		case "createRuntime":
			hooks.CreateRuntime = append(hooks.CreateRuntime, h)
		case "poststop":
			hooks.Poststop = append(hooks.Poststop, h)
		}
	}
	return hooks, hd
}

// TestShippedHooksDFileWithRunc applies hooks.d/nri-cni.json as hooks.d
// clients do.
func TestShippedHooksDFileWithRunc(t *testing.T) {
	e := newHookEnv(t, nil)
	hooks, hd := e.shippedHooks("nri-cni.json")
	require.Equal(t, "1.0.0", hd.Version)
	require.NotNil(t, hd.When.Always)
	require.True(t, *hd.When.Always)
	require.ElementsMatch(t, []string{"createRuntime", "poststop"}, hd.Stages)
	require.Contains(t, strings.Join(hd.Hook.Env, " "), "PATH=")
	require.Equal(t, []string{"nri-cni", "hook", "--config", "/etc/nri-cni/nri.conf"}, hd.Hook.Args)

	id := harness.RandomName("c")
	b := testenv.BusyboxBundle(t, e.runc, filepath.Join(e.dir, "b"), []string{"sh", "-c", "ip -4 addr show dev net1"}, hooks, nil)
	var stdout, stderr bytes.Buffer
	cmd := e.runcCmd(id, "run", "--bundle", b, id)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "runc run: %s", stderr.String())
	assert.Regexp(t, `inet \d+\.\d+\.\d+\.\d+/24`, stdout.String())
	e.assertNoLeaks()
}
