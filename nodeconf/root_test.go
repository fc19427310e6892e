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
