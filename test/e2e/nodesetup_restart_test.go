package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// node-setup's check judges the running runtime, not only its files: after
// node-setup the real runtime still runs without the drop-in, and the check
// says "restart pending" (node-setup exits 0, --check 3) until the runtime
// is restarted; then it says fail-closed (exit 0). The runtime is found as
// the peer of the socket its config names, its start in /proc.

// TestNodeSetupRestartPendingContainerd: a containerd 2.4.2 daemon reading
// a host-like root (its /etc and /run are the root's, in a private mount
// namespace), its main config naming the default API socket
// /run/containerd/containerd.sock, which node-setup --root finds under the
// root.
func TestNodeSetupRestartPendingContainerd(t *testing.T) {
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "nsr") // short: unix socket paths
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := hostTree(t, map[string]string{"etc/containerd/config.toml": fmt.Sprintf(`version = 3
root = %q
state = "/run/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"]

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.nri.v1.nri"]
  socket_path = "/run/nri/nri.sock"
`, filepath.Join(dir, "root"))})
	require.NoError(t, os.MkdirAll(filepath.Join(root, "run"), 0o755))
	socket := filepath.Join(root, "run/containerd/containerd.sock")

	first := startRootedContainerd(t, root, socket)
	code, out := nodeSetup(t, root, "--runtime", "containerd", "--check")
	assert.Equal(t, 1, code, "not set up yet:\n%s", out)
	assert.Contains(t, out, "state: fail-open")

	code, out = nodeSetup(t, root, "--runtime", "containerd")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, fmt.Sprintf("state: restart-pending: changed after the running containerd (pid %d)", first.Process.Pid))
	assert.Contains(t, out, "the previous file is kept as /etc/containerd/config.toml.nri-cni-backup-")
	code, out = nodeSetup(t, root, "--runtime", "containerd", "--check")
	assert.Equal(t, 3, code, out)
	assert.Contains(t, out, "fix: restart containerd (systemctl restart containerd)")

	stopRootedContainerd(t, first)
	code, out = nodeSetup(t, root, "--runtime", "containerd", "--check")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "state: fail-closed: nothing serves /run/containerd/containerd.sock")

	second := startRootedContainerd(t, root, socket)
	code, out = nodeSetup(t, root, "--runtime", "containerd", "--check")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, fmt.Sprintf("state: fail-closed: the running containerd (pid %d,", second.Process.Pid))
	stopRootedContainerd(t, second)
}

// startRootedContainerd starts containerd with root's /etc and /run as its
// own (a private mount namespace: nothing of the host's /etc or /run is
// read or changed) and waits for its socket (the host path under root).
func startRootedContainerd(t *testing.T, root, socket string) *exec.Cmd {
	t.Helper()
	ctd := filepath.Join(world.tools.ContainerdDir, "containerd")
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$1" /etc && mount --bind "$2" /run && shift 2 && exec "$@"`, "sh",
		filepath.Join(root, "etc"), filepath.Join(root, "run"), ctd, "--config", "/etc/containerd/config.toml")
	logf, err := os.OpenFile(filepath.Join(root, "containerd.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stopRootedContainerd(t, cmd) })
	testenv.Eventually(t, 30*time.Second, "containerd serving "+socket, func() bool {
		c, err := net.Dial("unix", socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return cmd
}

// stopRootedContainerd stops it (SIGTERM by pid, SIGKILL after 15 s),
// once.
func stopRootedContainerd(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// TestNodeSetupRestartPendingCRIO: a CRI-O 1.36.3 daemon started without
// nri-cni's drop-in; node-setup names its crio.conf and crio.conf.d
// (--config, --config-dir) and finds it on the socket crio.conf names.
func TestNodeSetupRestartPendingCRIO(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "nsc") // short: unix socket paths
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := harness.StartCRIO(ctx, harness.CRIOOpts{Dir: dir, Tools: world.tools, CRIOBinDir: world.tools.CRIODir,
		DropInfra: true, PauseTar: world.pauseTar})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Close(context.Background()))
		assert.Empty(t, c.Leftovers(), "left behind by crio")
	})
	args := []string{"--runtime", "crio", "--config", c.ConfigFile(), "--config-dir", c.ConfDir()}
	run := func(extra ...string) (int, string) {
		return nodeSetup(t, "/", append(append([]string{}, args...), extra...)...)
	}

	code, out := run("--check")
	assert.Equal(t, 1, code, "not set up yet:\n%s", out)
	code, out = run()
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, c.ConfDir()+"/10-nri-cni.conf: written")
	assert.Contains(t, out, fmt.Sprintf("state: restart-pending: changed after the running cri-o (pid %d)", c.Pid()))
	code, out = run("--check")
	assert.Equal(t, 3, code, out)
	assert.Contains(t, out, "fix: restart CRI-O (systemctl restart crio)")

	require.NoError(t, c.Restart(ctx))
	code, out = run("--check")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, fmt.Sprintf("state: fail-closed: the running cri-o (pid %d,", c.Pid()))
}
