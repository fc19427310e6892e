package nodeconf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// TestHostPathResolvesInsideRoot: absolute symlinks under the root (Debian's
// /var/run -> /run, an /etc/containerd kept elsewhere) lead inside the root,
// never to this machine's own files.
func TestHostPathResolvesInsideRoot(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "run/containerd"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var"), 0o755))
	require.NoError(t, os.Symlink("/run", filepath.Join(root, "var/run")))
	require.NoError(t, os.Symlink("../../..", filepath.Join(root, "run/containerd/up")))
	tests := []struct{ in, want string }{
		{"/var/run/containerd/containerd.sock", filepath.Join(root, "run/containerd/containerd.sock")},
		{"/var/run/new/file", filepath.Join(root, "run/new/file")}, // not there yet: joined as it is
		{"/run/containerd/up/etc", filepath.Join(root, "etc")},     // ".." stops at the root
		{"/etc/containerd/config.toml", filepath.Join(root, "etc/containerd/config.toml")},
	}
	for _, tc := range tests {
		got, err := HostPath(root, tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	got, err := HostPath("/", "/etc/hostname")
	require.NoError(t, err)
	assert.Equal(t, "/etc/hostname", got, "root / is this machine")
}

// TestCheckReadsUnderRootThroughAbsoluteSymlinks: a host whose
// /etc/containerd is an absolute symlink (-> /srv/containerd) is read
// inside the root; os.DirFS would have followed it to this machine's /srv.
func TestCheckReadsUnderRootThroughAbsoluteSymlinks(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "srv/containerd")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "conf.d"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.Symlink("/srv/containerd", filepath.Join(root, "etc/containerd")))
	require.NoError(t, os.WriteFile(filepath.Join(real, "config.toml"), MinimalContainerdConfig(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(real, "conf.d", node.ContainerdDropInName), node.ContainerdDropIn(), 0o644))
	r := Check(Options{Runtime: "containerd", Root: root})
	assert.True(t, r.OK(), r.String())
	assert.Equal(t, []string{ContainerdConfig, ContainerdDropIn}, r.Files)
}

// TestCheckExecutable: the await hook's binary as the host would run it:
// missing, a directory or without an execute bit is named; a symlink to
// an executable inside the root is fine.
func TestCheckExecutable(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(root, "opt/nri-cni/bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "nri-cni"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "plain"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(bin, "dir"), 0o755))
	require.NoError(t, os.Symlink("/opt/nri-cni/bin/nri-cni", filepath.Join(bin, "link")))
	tests := []struct{ p, err string }{
		{"/opt/nri-cni/bin/nri-cni", ""},
		{"/opt/nri-cni/bin/link", ""},
		{"/opt/nri-cni/bin/absent", "/opt/nri-cni/bin/absent is missing on the node"},
		{"/opt/nri-cni/bin/plain", "/opt/nri-cni/bin/plain is not executable (mode 0644)"},
		{"/opt/nri-cni/bin/dir", "/opt/nri-cni/bin/dir is not a regular file"},
	}
	for _, tc := range tests {
		err := CheckExecutable(root, tc.p)
		if tc.err == "" {
			assert.NoError(t, err, tc.p)
			continue
		}
		assert.ErrorContains(t, err, tc.err, tc.p)
	}
}
