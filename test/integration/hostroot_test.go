package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/deviceinfo"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// standInRoot mounts a stand-in of the host's / (harness.MountNodeRoot: this
// machine's system dirs and /proc, a /run of its own with /var/run an
// absolute symlink to it, as on Debian, Ubuntu and kind nodes) with work
// bound at its path. Unmounted at cleanup.
func standInRoot(t *testing.T, work string) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), testenv.UniqueName("nchr"))
	require.NoError(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() { _ = os.Remove(dir) }) // only ever rmdir'ed
	undo, err := harness.MountNodeRoot(dir, false, harness.RootBind{Source: work, Path: work})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Errorf("unmounting the stand-in root %s: %v", dir, err)
		}
	})
	return dir
}

// TestPluginRootNeedsHostPID: `nri-cni run` with pluginRoot starts and
// serves the runtime when it shares the PID namespace of the root's /proc
// (hostPID: here this machine's), and the same binary with the same config
// in a PID namespace of its own (a pod without hostPID) refuses to start,
// naming pluginRoot and hostPID, instead of handing plugins /proc paths of
// other processes.
func TestPluginRootNeedsHostPID(t *testing.T) {
	testenv.RequireRoot(t)
	unshare, err := exec.LookPath("unshare")
	require.NoError(t, err, "util-linux's unshare")
	work, err := os.MkdirTemp("", "nchp") // short: it holds sockets
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	root := standInRoot(t, work)

	e := &env{t: t, root: work}
	e.cfg = config.Default()
	e.cfg.ConfDir, e.cfg.BinDirs, e.cfg.PluginRoot = filepath.Join(work, "net.d"), []string{"/opt/cni/bin"}, root
	e.cfg.CacheDir, e.cfg.StateDir = filepath.Join(work, "cache"), filepath.Join(work, "state")
	require.NoError(t, os.MkdirAll(e.cfg.ConfDir, 0o755))
	e.startRuntime()
	e.startExternalBinary() // fails the test unless it connected and synchronized with the runtime

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound, not a measure
	defer cancel()
	// --kill-child: nothing of it outlives unshare, whatever happens.
	cmd := exec.CommandContext(ctx, unshare, "--pid", "--fork", "--mount-proc", "--kill-child",
		filepath.Join(work, "nri-cni"), "run", "--config", filepath.Join(work, "nri.conf"), "--socket", filepath.Join(work, "proxy.sock"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "nri-cni in a PID namespace of its own must exit at once: %v\n%s", err, out)
	assert.Equal(t, 1, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "pluginRoot "+root+": nri-cni does not see the host's PIDs")
	assert.Contains(t, string(out), "hostPID: true")
}

// inRoot runs a shell script chrooted into root, as a CNI plugin runs under
// pluginRoot, and returns its output.
func inRoot(t *testing.T, root, script string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir, cmd.SysProcAttr = "/", &syscall.SysProcAttr{Chroot: root}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "chrooted into %s: %s: %s", root, script, out)
	return string(out)
}

// TestDeviceInfoInsidePluginRoot: under pluginRoot on a node whose /var/run
// links to /run (the stand-in root), a device plugin's file written on the
// node seeds the attachment's device-info file, which a plugin chrooted into
// the root reads at the path nri-cni hands it (CNIDeviceInfoFile) and
// updates, and nri-cni reads the update back and removes the file; nothing
// lands in nri-cni's own /run.
func TestDeviceInfoInsidePluginRoot(t *testing.T) {
	testenv.RequireRoot(t)
	work, err := os.MkdirTemp("", "ncdi")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) })
	root := standInRoot(t, work)
	base := testenv.UniqueName("ncdi")
	// Were the directory resolved outside the root, it would be this
	// machine's /run/<base>: gone again at cleanup.
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join("/run", base)) })
	s := deviceinfo.Store{Root: root, Dir: "/var/run/" + base + "/devinfo"}
	a := deviceinfo.Attachment{Network: "team-a/sriov", ContainerID: "sandbox1", IfName: "net1"}

	dp, err := s.DPPath("example.com/vf", "0000:3b:02.2")
	require.NoError(t, err)
	inRoot(t, root, "mkdir -p "+filepath.Dir(dp)+" && printf '%s' '"+
		`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.2","pf-pci-address":"0000:3b:00.0"}}`+"' > "+dp)
	p, seeded, err := s.SeedCNI(a, "example.com/vf", "0000:3b:02.2", deviceinfo.NewPCI("0000:3b:02.2"))
	require.NoError(t, err)
	require.NotNil(t, seeded)
	assert.Equal(t, "0000:3b:00.0", seeded.PCI.PFPCIAddress, "seeded from the device plugin's file, found in the root")
	assert.Equal(t, "/var/run/"+base+"/devinfo/cni/team-a-sriov-sandbox1_net1", p, "the capability's value: a host path")

	want, err := seeded.Marshal()
	require.NoError(t, err)
	assert.JSONEq(t, string(want), inRoot(t, root, "cat "+p), "the plugin reads what nri-cni wrote")
	inRoot(t, root, "printf '%s' '"+`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.2","representor-device":"eth7"}}`+"' > "+p)
	got, err := s.ReadCNI(a)
	require.NoError(t, err)
	assert.Equal(t, "eth7", got.PCI.RepresentorDevice, "nri-cni reads back what the plugin wrote")
	assert.NoDirExists(t, filepath.Join("/run", base), "nothing in nri-cni's own /run")

	require.NoError(t, s.RemoveCNI(a))
	assert.Equal(t, "gone\n", inRoot(t, root, "test -e "+p+" || echo gone"))
}
