package nodeconf

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// TestProcessStart: a child started after t0 is found to start at or after
// t0 (less the 10 ms tick it is truncated to) and not after now.
func TestProcessStart(t *testing.T) {
	t0 := time.Now()
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	start, err := ProcessStart("/proc", cmd.Process.Pid)
	require.NoError(t, err)
	assert.False(t, start.Before(t0.Add(-time.Second/userHZ)), "start %s, t0 %s", start, t0)
	assert.False(t, start.After(time.Now()), "start %s", start)

	_, err = ProcessStart(t.TempDir(), 1)
	assert.ErrorContains(t, err, "the runtime's start")
}

// TestProcessStartOddCommandName: a command name with spaces and ')' does
// not shift the fields.
func TestProcessStartOddCommandName(t *testing.T) {
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "7"), 0o755))
	fields := "S 1 7 7 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123 0 0"
	require.NoError(t, os.WriteFile(filepath.Join(proc, "7", "stat"), []byte("7 (a) b) (c) "+fields+"\n"), 0o644))
	start, err := ProcessStart(proc, 7)
	require.NoError(t, err)
	assert.False(t, start.IsZero())

	require.NoError(t, os.WriteFile(filepath.Join(proc, "7", "stat"), []byte("7 (x) S 1\n"), 0o644))
	_, err = ProcessStart(proc, 7)
	assert.ErrorContains(t, err, "fields")
}

// TestRuntimeAt: the socket's peer is the process serving it (here this
// test); nothing listening (no socket, or a stale one) is NotRunning.
func TestRuntimeAt(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "run"), 0o755))
	ctx := context.Background()

	assert.Equal(t, Running{NotRunning: true}, RuntimeAt(ctx, root, "/run/absent.sock"))

	stale, err := net.Listen("unix", filepath.Join(root, "run/stale.sock"))
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, stale.Close())
	assert.Equal(t, Running{NotRunning: true}, RuntimeAt(ctx, root, "/run/stale.sock"))

	l, err := net.Listen("unix", filepath.Join(root, "run/rt.sock"))
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	rt := RuntimeAt(ctx, root, "/run/rt.sock")
	assert.Empty(t, rt.Unknown)
	assert.Equal(t, os.Getpid(), rt.Pid)
	assert.False(t, rt.Started.IsZero())

	assert.Contains(t, RuntimeProcess(0).Unknown, "hostPID")
}

// TestJudge: set-up files changed after the running runtime started are a
// restart pending; a runtime started after them is fail-closed, as is none
// running; an unknown one is unverified; findings are fail-open whatever
// runs.
func TestJudge(t *testing.T) {
	written := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	setUp := func(t *testing.T) string {
		root := t.TempDir()
		for p, data := range map[string][]byte{mainPath: MinimalContainerdConfig(), dropInPath: node.ContainerdDropIn()} {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, p), data, 0o644))
			require.NoError(t, os.Chtimes(filepath.Join(root, p), written, written))
		}
		return root
	}
	tests := []struct {
		name    string
		rt      Running
		noDrop  bool
		state   State
		changed []string
		text    string
	}{
		{name: "started before the drop-in", rt: Running{Pid: 42, Started: written.Add(-time.Hour)},
			state: StateRestartPending, changed: []string{ContainerdConfig, ContainerdDropIn},
			text: "state: restart-pending: changed after the running containerd (pid 42) started at 2026-12-01T09:00:00Z: " +
				"/etc/containerd/config.toml, /etc/containerd/conf.d/10-nri-cni.toml; it runs without these changes until it is restarted\n" +
				"    fix: restart containerd (systemctl restart containerd)"},
		{name: "started after it", rt: Running{Pid: 42, Started: written.Add(time.Second)}, state: StateFailClosed,
			text: "state: fail-closed: the running containerd (pid 42, started 2026-12-01T10:00:01Z) loaded these files"},
		{name: "not running", rt: Running{NotRunning: true}, state: StateFailClosed,
			text: "state: fail-closed: nothing serves /run/containerd/containerd.sock: the runtime loads these files when it starts"},
		{name: "not visible", rt: RuntimeProcess(0), state: StateUnverified,
			text: "state: unverified: whether the running containerd loaded these files is not known: the runtime's process is not visible here"},
		{name: "not set up", rt: Running{Pid: 42, Started: written.Add(time.Second)}, noDrop: true, state: StateFailOpen,
			text: "state: fail-open"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := setUp(t)
			if tc.noDrop {
				require.NoError(t, os.Remove(filepath.Join(root, dropInPath)))
			}
			o := Options{Runtime: "containerd", Root: root}
			r := Check(o)
			if !tc.noDrop {
				assert.Equal(t, StateUnverified, r.State(), "not judged yet")
			}
			r.Judge(o, tc.rt)
			assert.Equal(t, tc.state, r.State())
			assert.Equal(t, tc.changed, r.Changed)
			assert.Contains(t, r.String(), tc.text)
		})
	}
}

// TestJudgeWatchesDropInDirs: a file removed from a directory the runtime
// lists (CRI-O's crio.conf.d) after it started is a change too.
func TestJudgeWatchesDropInDirs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/crio/crio.conf.d")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, node.CRIODropInName), node.CRIODropIn(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "99-off.conf"), []byte("[crio.nri.default_validator]\nnri_enable_default_validator = false\n"), 0o644))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(dir, node.CRIODropInName), old, old))
	started := time.Now().Add(-time.Minute)
	require.NoError(t, os.Remove(filepath.Join(dir, "99-off.conf"))) // after the start: dir's mtime now
	o := Options{Runtime: "crio", Root: root}
	r := Check(o)
	require.True(t, r.OK(), r.String())
	assert.Equal(t, CRIOSocket, r.Socket)
	r.Judge(o, Running{Pid: 9, Started: started})
	assert.Equal(t, StateRestartPending, r.State())
	assert.Equal(t, []string{CRIODropInDir}, r.Changed)
}

// TestSocketFromConfig: the runtime's API socket is the one its config
// names, else its default.
func TestSocketFromConfig(t *testing.T) {
	ctd := Check(Options{Runtime: "containerd", FS: fstestFS(mainPath,
		"version = 3\nimports = [\"/etc/containerd/conf.d/10-nri-cni.toml\"]\n[grpc]\n  address = \"/run/k8s/containerd.sock\"\n")})
	assert.Equal(t, "/run/k8s/containerd.sock", ctd.Socket)
	crio := Check(Options{Runtime: "crio", FS: fstestFS("etc/crio/crio.conf", "[crio.api]\nlisten = \"/run/x/crio.sock\"\n")})
	assert.Equal(t, "/run/x/crio.sock", crio.Socket)
	assert.Equal(t, ContainerdSocket, Check(Options{Runtime: "containerd", FS: fstestFS(mainPath, "version = 3\n")}).Socket)
}
