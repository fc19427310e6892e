package hostroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestPath(t *testing.T) {
	t.Parallel()
	root := testenv.HostLikeRoot(t)
	tests := []struct {
		in, want string // want "" = an error
	}{
		{"/var/run/netns/pod1", "/run/netns/pod1"},
		{"/var/run/k8s.cni.cncf.io/devinfo/cni", "/run/k8s.cni.cncf.io/devinfo/cni"}, // not there yet: as it will be
		{"/var/lib/kubelet/pod-resources/kubelet.sock", "/data/kubelet/pod-resources/kubelet.sock"},
		{"/opt/cni/bin/bridge", "/usr/libexec/cni/bridge"},
		{"/opt/other/host-local", "/usr/libexec/cni/bridge"},
		{"/opt/other/escape", "/usr/libexec/cni/bridge"},
		{"/../../opt/cni/bin/bridge", "/usr/libexec/cni/bridge"},
		{"/opt/other/dir", "/opt/other/dir"},
		{"/opt/other/to-nri-cni-passwd", "/etc/passwd"}, // the root's, which it does not have
		{"/missing/x", "/missing/x"},
		{"/", "/"},
		{"/opt/other/loop1", ""},
	}
	for _, tt := range tests {
		got, err := Path(root, tt.in)
		if tt.want == "" {
			assert.ErrorIs(t, err, syscall.ELOOP, "%s resolved to %s", tt.in, got)
			continue
		}
		if assert.NoError(t, err, tt.in) {
			assert.Equal(t, filepath.Join(root, tt.want), got, tt.in)
		}
	}
	// The root's own trailing slash changes nothing.
	got, err := Path(root+"/", "/var/run/netns/pod1")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "run/netns/pod1"), got)
}

// nri-cni's own / (no pluginRoot, nodeRoot "/"): paths as they are; the
// kernel resolves them.
func TestPathOwnRoot(t *testing.T) {
	t.Parallel()
	for _, root := range []string{"", "/", "//"} {
		assert.False(t, On(root), "%q", root)
		got, err := Path(root, "/var/run/x/../y")
		require.NoError(t, err)
		assert.Equal(t, "/var/run/x/../y", got, "%q", root)
	}
	assert.True(t, On("/host"))
	assert.True(t, On("/host/"))
}

func TestFS(t *testing.T) {
	t.Parallel()
	root := testenv.HostLikeRoot(t)
	testenv.WriteTree(t, root, map[string]string{
		"etc/containerd/config.toml":          "->/nix/store/abc-containerd.toml", // NixOS-like
		"nix/store/abc-containerd.toml":       "version = 3\n",
		"etc/containerd/conf.d/nri-cni.toml":  "x\n",
		"etc/containerd/conf.d/stray.toml":    "->/var/run/stray.toml",
		"run/stray.toml":                      "y\n",
		"etc/containerd/conf.d/sub/deep.toml": "z\n",
	})
	fsys := FS(root)
	data, err := fs.ReadFile(fsys, "etc/containerd/config.toml")
	require.NoError(t, err)
	assert.Equal(t, "version = 3\n", string(data), "an absolute symlink read inside the root")
	data, err = fs.ReadFile(fsys, "etc/containerd/conf.d/stray.toml")
	require.NoError(t, err)
	assert.Equal(t, "y\n", string(data), "through /var/run -> /run inside the root")
	matches, err := fs.Glob(fsys, "etc/containerd/conf.d/*.toml")
	require.NoError(t, err)
	assert.Equal(t, []string{"etc/containerd/conf.d/nri-cni.toml", "etc/containerd/conf.d/stray.toml"}, matches)
	_, err = fs.Stat(fsys, "etc/missing.toml")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = fsys.Open("/etc/containerd/config.toml")
	assert.ErrorIs(t, err, fs.ErrInvalid, "fs.FS names have no leading /")
	_, err = fsys.Open("opt/other/loop1")
	assert.True(t, errors.Is(err, syscall.ELOOP), "%v", err)
	require.NoError(t, fstest.TestFS(FS(filepath.Join(root, "etc/containerd/conf.d/sub")), "deep.toml"))

	assert.Equal(t, os.DirFS("/"), FS(""), "its own /: the OS resolves")
	assert.Equal(t, os.DirFS("/"), FS("/"))
}
