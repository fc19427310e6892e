package nodeconf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// The runtime's files are read under Root as the runtime reads them on the
// host: a config file and a drop-in dir that are absolute symlinks there
// (NixOS links /etc's files into its store) are followed inside Root, not
// into this process's own /.
func TestCheckResolvesSymlinksInsideRoot(t *testing.T) {
	root := t.TempDir()
	for p, data := range map[string][]byte{
		"store/containerd.toml":                     []byte("version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"),
		"store/conf.d/" + node.ContainerdDropInName: node.ContainerdDropIn(),
		"store/crio.conf.d/" + node.CRIODropInName:  node.CRIODropIn(),
		"etc/containerd/.keep":                      nil,
		"etc/crio/.keep":                            nil,
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), data, 0o644))
	}
	for link, target := range map[string]string{
		"etc/containerd/config.toml": "/store/containerd.toml",
		"etc/containerd/conf.d":      "/store/conf.d",
		"etc/crio/crio.conf.d":       "/store/crio.conf.d",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(root, link)))
	}

	r := Check(Options{Runtime: "containerd", RuntimeVersion: "2.4.2", Root: root})
	assert.True(t, r.OK(), "%v", r.Findings)
	assert.Equal(t, []string{ContainerdConfig, ContainerdDropIn}, r.Files, "host paths, as the runtime names them")

	r = Check(Options{Runtime: "cri-o", RuntimeVersion: "1.36.3", Root: root})
	assert.True(t, r.OK(), "%v", r.Findings)
	assert.Equal(t, []string{CRIODropIn}, r.Files)
}

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
