package hostroot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeProcs writes the status files CheckPIDs reads: nri-cni's /proc/self
// under proc, and the root's (its /proc a symlink to /realproc, resolved
// inside the root). A status "" is not written.
func fakeProcs(t *testing.T, own, rooted string) (proc, root string) {
	t.Helper()
	dir := t.TempDir()
	proc, root = filepath.Join(dir, "proc"), filepath.Join(dir, "host")
	write := func(p, status string) {
		if status == "" {
			return
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("Name:\tnri-cni\n"+status+"\nPPid:\t1\n"), 0o644))
	}
	write(filepath.Join(proc, "self/status"), own)
	write(filepath.Join(root, "realproc/self/status"), rooted)
	require.NoError(t, os.MkdirAll(root, 0o755))
	require.NoError(t, os.Symlink("/realproc", filepath.Join(root, "proc")))
	return proc, root
}

func TestCheckPIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		pid         int    // os.Getpid()
		own, rooted string // status lines
		wantErr     string // "" = none
		notHostPID  bool
	}{
		{name: "hostPID: one namespace", pid: 4242, own: "NSpid:\t4242", rooted: "NSpid:\t4242"},
		{name: "a PID namespace of its own (no hostPID)", pid: 7, own: "NSpid:\t7", rooted: "NSpid:\t4242\t7",
			notHostPID: true, wantErr: "(the host's) numbers this process 4242 then 7"},
		{name: "its own /proc is another namespace's", pid: 7, own: "NSpid:\t4242\t7", rooted: "NSpid:\t4242\t7",
			notHostPID: true, wantErr: "nri-cni's own /proc numbers this process 4242 then 7"},
		{name: "the root's /proc numbers another process", pid: 4242, own: "NSpid:\t4242", rooted: "NSpid:\t17",
			notHostPID: true, wantErr: "numbers this process 17"},
		{name: "the root has no /proc", pid: 4242, own: "NSpid:\t4242",
			wantErr: "/proc (the host's): open"},
		{name: "no NSpid (Linux before 4.1)", pid: 4242, own: "Pid:\t4242", rooted: "NSpid:\t4242",
			wantErr: "no NSpid line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			proc, root := fakeProcs(t, tt.own, tt.rooted)
			err := checkPIDs(proc, root, tt.pid)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.wantErr)
			assert.Equal(t, tt.notHostPID, errors.Is(err, ErrNotHostPID), "%v", err)
		})
	}
}

// Off (no pluginRoot): nothing is read.
func TestCheckPIDsOff(t *testing.T) {
	t.Parallel()
	for _, root := range []string{"", "/"} {
		assert.NoError(t, checkPIDs(filepath.Join(t.TempDir(), "no-proc"), root, 1))
	}
}

// This machine, for real: a root whose /proc is this machine's (a bind of
// it, as the tests' stand-in roots have; here a symlink outside the root
// would not do, so /proc/self/root, this process's own root, stands in).
// The refusal is tested with the binary in a PID namespace of its own
// (test/integration's TestPluginRootNeedsHostPID).
func TestCheckPIDsThisMachine(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/root/proc/self/status"); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	assert.NoError(t, CheckPIDs("/proc/self/root"))
}
