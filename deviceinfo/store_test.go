package deviceinfo

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPaths(t *testing.T) {
	s := Store{Dir: "/base"}
	p, err := s.DPPath("intel.com/sriov_vf", "0000:3b:02.2")
	require.NoError(t, err)
	assert.Equal(t, "/base/dp/intel.com-sriov_vf-0000:3b:02.2-device.json", p, "spec 4.1: / in the resource name becomes -")
	p, err = s.DPPath("example.com/res", "a/b")
	require.NoError(t, err)
	assert.Equal(t, "/base/dp/example.com-res-a-b-device.json", p, "and in the device ID (as the NAD client library does)")

	p, err = s.CNIPath(Attachment{Network: "team-a/storage", ContainerID: "abc123", IfName: "net1"})
	require.NoError(t, err)
	assert.Equal(t, "/base/cni/team-a-storage-abc123_net1", p, "Multus's <network>-<container>_<ifname>")

	p, err = Store{}.CNIPath(Attachment{Network: "n", ContainerID: "c", IfName: "net1"})
	require.NoError(t, err)
	assert.Equal(t, DefaultDir+"/cni/n-c_net1", p, "the spec's base directory by default")

	for _, a := range []Attachment{{"", "c", "i"}, {"n", "", "i"}, {"n", "c", ""}, {"n\x00", "c", "i"}} {
		_, err := s.CNIPath(a)
		assert.ErrorIs(t, err, ErrName, "%q", a)
	}
	_, err = s.DPPath("", "x")
	assert.ErrorIs(t, err, ErrName)
	_, err = s.DPPath("r", strings.Repeat("x", 300))
	assert.ErrorIs(t, err, ErrName, "longer than a file name can be")
}

// A network name of 253 bytes (a NAD's namespace/name) still makes a file
// name Linux takes, unique per network, not splitting a UTF-8 sequence.
func TestCNIPathLongNetwork(t *testing.T) {
	s := Store{Dir: "/base"}
	id := strings.Repeat("f", 64)
	long1 := "team-a/" + strings.Repeat("n", 246)
	long2 := "team-a/" + strings.Repeat("n", 245) + "m"
	p1, err := s.CNIPath(Attachment{Network: long1, ContainerID: id, IfName: "net15"})
	require.NoError(t, err)
	p2, err := s.CNIPath(Attachment{Network: long2, ContainerID: id, IfName: "net15"})
	require.NoError(t, err)
	assert.LessOrEqual(t, len(filepath.Base(p1)), 255)
	assert.NotEqual(t, p1, p2)
	assert.True(t, strings.HasSuffix(p1, "-"+id+"_net15"))

	p3, err := s.CNIPath(Attachment{Network: strings.Repeat("é", 150), ContainerID: id, IfName: "net1"})
	require.NoError(t, err)
	assert.True(t, utf8.ValidString(p3))
	assert.LessOrEqual(t, len(filepath.Base(p3)), 255)
}

func TestDPFiles(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	_, err := s.ReadDP("example.com/nic", "0000:01:00.1")
	assert.ErrorIs(t, err, fs.ErrNotExist, "no file")

	d := NewPCI("0000:01:00.1")
	d.PCI.RDMADevice = "mlx5_1"
	require.NoError(t, s.WriteDP("example.com/nic", "0000:01:00.1", d))
	got, err := s.ReadDP("example.com/nic", "0000:01:00.1")
	require.NoError(t, err)
	assert.Equal(t, d, got)
	p, _ := s.DPPath("example.com/nic", "0000:01:00.1")
	st, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())

	require.NoError(t, s.RemoveDP("example.com/nic", "0000:01:00.1"))
	require.NoError(t, s.RemoveDP("example.com/nic", "0000:01:00.1"), "removing twice is fine")
	_, err = s.ReadDP("example.com/nic", "0000:01:00.1")
	assert.ErrorIs(t, err, fs.ErrNotExist)

	assert.ErrorIs(t, s.WriteDP("r", "d", NewPCI("nope")), ErrInvalid, "an invalid document is not written")
	_, err = s.ReadDP("r", "d")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	left, _ := os.ReadDir(filepath.Join(s.Dir, DPSubdir))
	assert.Empty(t, left, "no temporary file left")
}

// What another program put there is read only if it is a valid document in
// a regular file: not through a symlink, not from a FIFO (which would block
// a plain read), not beyond MaxSize.
func TestReadRefusesWhatIsNotADocument(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	dp := filepath.Join(s.Dir, DPSubdir)
	require.NoError(t, os.MkdirAll(dp, 0o755))
	path := func(res string) string { p, _ := s.DPPath(res, "d"); return p }

	target := filepath.Join(s.Dir, "elsewhere.json")
	require.NoError(t, os.WriteFile(target, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:00:01.0"}}`), 0o644))
	require.NoError(t, os.Symlink(target, path("link")))
	_, err := s.ReadDP("link", "d")
	assert.ErrorContains(t, err, "symbolic link")

	require.NoError(t, syscall.Mkfifo(path("fifo"), 0o644))
	_, err = s.ReadDP("fifo", "d")
	assert.ErrorContains(t, err, "not a regular file")

	require.NoError(t, os.WriteFile(path("big"), []byte(strings.Repeat(" ", MaxSize+10)), 0o644))
	_, err = s.ReadDP("big", "d")
	assert.ErrorIs(t, err, ErrTooLarge)

	require.NoError(t, os.WriteFile(path("bad"), []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"eth0"}}`), 0o644))
	_, err = s.ReadDP("bad", "d")
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, path("bad"), "names the file")
}

func TestCNIFileLifecycle(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	a := Attachment{Network: "sriov-net", ContainerID: "sandbox1", IfName: "net1"}
	require.NoError(t, s.WriteDP("example.com/vf", "0000:3b:02.2", &DeviceInfo{Type: TypePCI, Version: "1.0.0",
		PCI: &PCI{PCIAddress: "0000:3b:02.2", PFPCIAddress: "0000:3b:00.0"}}))

	// Seeded from the device plugin file, over the fallback.
	p, seeded, err := s.SeedCNI(a, "example.com/vf", "0000:3b:02.2", NewPCI("0000:3b:02.2"))
	require.NoError(t, err)
	want, _ := s.CNIPath(a)
	assert.Equal(t, want, p)
	assert.Equal(t, "0000:3b:00.0", seeded.PCI.PFPCIAddress)

	// The chain's plugin updates it; read back after ADD.
	require.NoError(t, os.WriteFile(p, []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.2","representor-device":"eth7"}}`), 0o644))
	got, err := s.ReadCNI(a)
	require.NoError(t, err)
	assert.Equal(t, "eth7", got.PCI.RepresentorDevice)

	// DEL removes it, twice is fine.
	require.NoError(t, s.RemoveCNI(a))
	require.NoError(t, s.RemoveCNI(a))
	_, err = s.ReadCNI(a)
	assert.ErrorIs(t, err, fs.ErrNotExist)

	// No device plugin file: the fallback.
	_, seeded, err = s.SeedCNI(a, "example.com/vf", "0000:3b:02.3", NewPCI("0000:3b:02.3"))
	require.NoError(t, err)
	assert.Equal(t, NewPCI("0000:3b:02.3"), seeded)

	// Nothing to seed: no file, and a stale one of an earlier ADD goes.
	p, seeded, err = s.SeedCNI(a, "", "", nil)
	require.NoError(t, err)
	assert.Nil(t, seeded)
	_, err = os.Stat(p)
	assert.ErrorIs(t, err, fs.ErrNotExist)

	// An invalid device plugin file is an error, not replaced by the fallback.
	dp, _ := s.DPPath("example.com/vf", "bad")
	require.NoError(t, os.WriteFile(dp, []byte(`{"type":"pci"}`), 0o644))
	_, _, err = s.SeedCNI(a, "example.com/vf", "bad", NewPCI("0000:3b:02.3"))
	assert.ErrorIs(t, err, ErrInvalid)
}

// nri-cni sees the host's / at Root (the plugins run chrooted into it) on a
// Debian-like host whose /var/run is an absolute symlink to /run: the file
// the capability names (/var/run/...) is the one nri-cni writes, reads back
// and removes, in the root's /run, never in nri-cni's own /run; a device
// plugin's file written on the host is found there too.
func TestRootWithAbsoluteVarRunSymlink(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "run"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(root, "var"), 0o755))
	require.NoError(t, os.Symlink("/run", filepath.Join(root, "var/run")))
	// A name of the test's own: were it resolved outside the root, it would
	// land in this machine's /run, and go again at cleanup.
	base := "nri-cni-test-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join("/run", base)) })
	dir := "/var/run/" + base + "/devinfo"
	s := Store{Root: root, Dir: dir}
	inRoot := func(p string) string { return filepath.Join(root, "run", strings.TrimPrefix(p, "/var/run/")) }

	a := Attachment{Network: "n", ContainerID: "c", IfName: "net1"}
	p, seeded, err := s.SeedCNI(a, "", "", NewPCI("0000:01:00.1"))
	require.NoError(t, err)
	require.NotNil(t, seeded)
	assert.Equal(t, dir+"/cni/n-c_net1", p, "the plugins' path: a host path")
	assert.FileExists(t, inRoot(p), "written in the root's /run, where a plugin chrooted into the root opens %s", p)
	assert.NoDirExists(t, filepath.Join("/run", base), "nothing in this machine's own /run")
	got, err := s.ReadCNI(a)
	require.NoError(t, err, "read back")
	assert.Equal(t, seeded, got)

	// A plugin updates it in place (as it sees it); nri-cni reads that.
	require.NoError(t, os.WriteFile(inRoot(p), []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:00.1","representor-device":"eth7"}}`), 0o644))
	got, err = s.ReadCNI(a)
	require.NoError(t, err)
	assert.Equal(t, "eth7", got.PCI.RepresentorDevice)
	require.NoError(t, s.RemoveCNI(a))
	assert.NoFileExists(t, inRoot(p))

	// A device plugin on the host wrote its file under /var/run (= /run).
	dp, err := s.DPPath("example.com/vf", "0000:3b:02.2")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(dp, dir+"/dp/"), dp)
	require.NoError(t, os.MkdirAll(filepath.Dir(inRoot(dp)), 0o755))
	require.NoError(t, os.WriteFile(inRoot(dp), []byte(`{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.2"}}`), 0o644))
	_, seeded, err = s.SeedCNI(a, "example.com/vf", "0000:3b:02.2", nil)
	require.NoError(t, err)
	require.NotNil(t, seeded, "the device plugin's file found in the root")
	assert.Equal(t, "0000:3b:02.2", seeded.PCI.PCIAddress)
}

// A loop on the way is an error naming the directory, not a file elsewhere.
func TestRootLoop(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "var"), 0o755))
	require.NoError(t, os.Symlink("/var/run", filepath.Join(root, "var/run")))
	s := Store{Root: root}
	_, _, err := s.SeedCNI(Attachment{Network: "n", ContainerID: "c", IfName: "net1"}, "", "", NewPCI("0000:01:00.1"))
	assert.ErrorIs(t, err, syscall.ELOOP)
	assert.ErrorContains(t, err, "device-info directory "+DefaultDir+"/cni")
}
