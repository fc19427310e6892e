package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// podman is a private podman (Debian's 4.3, installed with CRI-O): its
// storage, state, network configs and hooks dir in dir, run by runc 1.5.2
// with its containers' (and conmon's) cgroups under a parent of its own,
// removed at cleanup (runc has no "no cgroups"). Every command runs in a private mount
// namespace with tmpfs over /var/lib and /dev/shm, where podman keeps its
// blob cache and lock segment whatever its flags (the host's are not ours
// to write); conmon and runc run in it too, and its mounts die with them.
type podman struct {
	t      *testing.T
	dir    string
	hooks  string
	image  string
	cgroup string // the containers' cgroup parent
}

func newPodman(ctx context.Context, t *testing.T) *podman {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman is installed with CRI-O (test/tools/install.sh crio): %v", err)
	}
	dir, err := os.MkdirTemp("", "pdm")
	require.NoError(t, err)
	p := &podman{t: t, dir: dir, hooks: filepath.Join(dir, "hooks.d"), image: "localhost/nri-cni-busybox:test",
		cgroup: "/" + harness.RandomName("nri-cni-podman-")}
	_, err = os.Stat("/sys/fs/cgroup/memory/libpod_parent")
	hadLibpodParent := err == nil
	t.Cleanup(func() {
		// conmon and podman's cleanup may still be leaving the cgroups (and
		// writing to dir) when podman run returns: wait for them first.
		testenv.Eventually(t, 30*time.Second, "podman's processes to leave its cgroups", func() bool {
			return harness.RemoveCgroupParent(p.cgroup) == nil
		})
		assert.NoError(t, harness.UnmountUnder(dir))
		assert.NoError(t, os.RemoveAll(dir))
		if _, err := os.Stat("/sys/fs/cgroup/memory/libpod_parent"); err == nil && !hadLibpodParent {
			assert.NoError(t, harness.RemoveCgroupParent("/libpod_parent"))
			t.Error("podman made /libpod_parent: removed")
		}
	})
	for _, d := range []string{p.hooks, filepath.Join(dir, "networks"), filepath.Join(dir, "tmp")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	files := map[string]string{
		"storage.conf":    fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "root"), filepath.Join(dir, "runroot")),
		"registries.conf": "unqualified-search-registries = []\n",
		"containers.conf": "[engine]\nevents_logger = \"none\"\n",
	}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
	}
	// A busybox image (podman import of a rootfs tar).
	bundle := testenv.BusyboxBundle(t, filepath.Join(world.tools.RuncDir, "runc"), filepath.Join(dir, "bundle"), []string{"true"}, nil, nil)
	tar := filepath.Join(dir, "rootfs.tar")
	out, err := exec.CommandContext(ctx, "tar", "-C", filepath.Join(bundle, "rootfs"), "-cf", tar, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	imported, err := p.run(ctx, "import", tar, p.image)
	require.NoError(t, err, "podman import: %s", imported)
	return p
}

// run runs podman with the private flags and args; its combined output.
func (p *podman) run(ctx context.Context, args ...string) (string, error) {
	script := `mount -t tmpfs -o size=16m nri-cni-podman /var/lib && mount -t tmpfs -o size=16m nri-cni-podman /dev/shm && exec podman "$@"`
	global := []string{"--root", filepath.Join(p.dir, "root"), "--runroot", filepath.Join(p.dir, "runroot"),
		"--tmpdir", filepath.Join(p.dir, "tmp"), "--storage-driver", "overlay", "--cgroup-manager", "cgroupfs",
		"--events-backend", "none", "--runtime", filepath.Join(world.tools.RuncDir, "runc"), "--hooks-dir", p.hooks,
		"--network-config-dir", filepath.Join(p.dir, "networks")}
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "podman"},
		append(global, args...)...)...)
	cmd.Env = []string{
		"PATH=" + world.tools.RuncDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CONTAINERS_STORAGE_CONF=" + filepath.Join(p.dir, "storage.conf"),
		"CONTAINERS_REGISTRIES_CONF=" + filepath.Join(p.dir, "registries.conf"),
		"CONTAINERS_CONF=" + filepath.Join(p.dir, "containers.conf"),
		"HOME=" + p.dir,
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// container runs a busybox container (removed when it exits) with the
// annotations and no network of podman's; its output.
func (p *podman) container(ctx context.Context, ann map[string]string, args ...string) (string, error) {
	run := []string{"run", "--rm", "--network", "none", "--cgroup-parent", p.cgroup, "--security-opt", "seccomp=unconfined",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
	for k, v := range ann {
		run = append(run, "--annotation", k+"="+v)
	}
	return p.run(ctx, append(append(run, p.image), args...)...)
}

// installHook writes the shipped hooks.d entry NAME into the hooks dir as an
// admin installs it, pointed at the test's binary and config.
func (p *podman) installHook(name, cfgPath string) {
	raw, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "hooks.d", name))
	require.NoError(p.t, err)
	var entry map[string]any
	require.NoError(p.t, json.Unmarshal(raw, &entry))
	hook := entry["hook"].(map[string]any)
	hook["path"], hook["args"] = world.bin, []string{"nri-cni", "hook", "--config", cfgPath}
	data, err := json.Marshal(entry)
	require.NoError(p.t, err)
	old, _ := filepath.Glob(filepath.Join(p.hooks, "*.json"))
	for _, f := range old {
		require.NoError(p.t, os.Remove(f))
	}
	require.NoError(p.t, os.WriteFile(filepath.Join(p.hooks, "nri-cni.json"), data, 0o644))
}

// TestPodmanHooksD: nri-cni's shipped hooks.d entries under a real podman
// 4.3 (Debian's) with runc 1.5.2, as `make install-hook` installs them.
//
//   - always (hooks.d/nri-cni.json), confDir never created (the old quick
//     start): a container that asks for nothing runs; one whose annotation
//     names a network (podSelection) fails at createRuntime, podman showing
//     nri-cni's message naming the network and the missing dir. Then with a
//     network config there: a container gets net1, released when it exits.
//   - annotation (hooks.d/nri-cni-annotated.json): podman matches `when`
//     against the container's annotations: an annotated container gets
//     net1; one without the annotation, or with a blank one, never runs the
//     hook — even with an nri.conf that does not parse.
func TestPodmanHooksD(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sec, cfg, cfgPath := pluginSetup(t, dir)
	netDir := cfg.ConfDir
	cfg.ConfDir = filepath.Join(dir, "never-created")
	require.NoError(t, cfg.Write(cfgPath))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s", cfg.Log())
		}
	})
	p := newPodman(ctx, t)
	p.installHook("nri-cni.json", cfgPath)
	asks := map[string]string{plan.AnnotationNetworks: sec.Name}
	// getsNet1: a container with the annotations sees net1 with an address
	// of the network; poststop releases it when the container is gone.
	getsNet1 := func(t *testing.T, ann map[string]string) {
		t.Helper()
		out, err := p.container(ctx, ann, "ip", "-4", "-o", "addr", "show", "dev", "net1")
		require.NoError(t, err, "%s", out)
		assert.Regexp(t, `inet \d+\.\d+\.\d+\.\d+/24`, out)
		testenv.Eventually(t, 10*time.Second, "poststop to release the address", func() bool {
			return len(sec.IPFiles()) == 0 && len(cfg.StateFiles()) == 0
		})
	}

	t.Run("AlwaysWithoutConfDir", func(t *testing.T) {
		out, err := p.container(ctx, nil, "sh", "-c", "echo started; ip -o link")
		require.NoError(t, err, "a container asking for nothing runs: %s", out)
		assert.Contains(t, out, "started")
		assert.NotContains(t, out, "net1")

		cfg.PodSelection = true
		require.NoError(t, cfg.Write(cfgPath))
		out, err = p.container(ctx, asks, "echo", "should not run")
		require.Error(t, err, "a container naming a missing network fails")
		t.Logf("podman: %s", strings.TrimSpace(out))
		assert.Contains(t, out, `unknown network "`+sec.Name+`"`)
		assert.Contains(t, out, cfg.ConfDir+" does not exist")
		assert.NotContains(t, out, "should not run")
		assert.Contains(t, cfg.Log(), "nothing to attach")
	})

	t.Run("AlwaysWithANetwork", func(t *testing.T) {
		cfg.ConfDir, cfg.PodSelection = netDir, false
		require.NoError(t, cfg.Write(cfgPath))
		getsNet1(t, nil)
	})

	t.Run("Annotation", func(t *testing.T) {
		p.installHook("nri-cni-annotated.json", cfgPath)
		cfg.PodSelection = true
		require.NoError(t, cfg.Write(cfgPath))
		getsNet1(t, asks)

		// nri.conf broken: containers that do not ask never run the hook.
		require.NoError(t, os.WriteFile(cfgPath, []byte("not: [yaml\n"), 0o644))
		for _, ann := range []map[string]string{nil, {plan.AnnotationNetworks: ""}, {"other": "x"}} {
			out, err := p.container(ctx, ann, "echo", "started")
			require.NoError(t, err, "annotations %v: %s", ann, out)
			assert.Contains(t, out, "started")
		}
		out, err := p.container(ctx, asks, "echo", "should not run")
		require.Error(t, err, "the hook ran for the annotated one and failed on the config")
		assert.Contains(t, out, "nri.conf")
	})
}
