package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// socketAndTimeoutKeys are keys the drop-ins must not set: an import
// overrides the main config, and harnesses run the runtimes with private
// sockets and timeouts.
var socketAndTimeoutKeys = map[string]bool{
	"socket_path": true, "disable_connections": true, "plugin_registration_timeout": true, "plugin_request_timeout": true,
}

// settingLines are a TOML text's lines without comments and blank lines.
func settingLines(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if l := strings.TrimSpace(line); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, strings.TrimRight(line, " \t"))
	}
	return out
}

// TestNodeDropInsEmbedded: deploy/node's package embeds exactly the files
// of deploy/node (what the binary installs is what the repository shows).
func TestNodeDropInsEmbedded(t *testing.T) {
	for path, embedded := range map[string][]byte{
		node.ContainerdDropInRepoPath: node.ContainerdDropIn(),
		node.CRIODropInRepoPath:       node.CRIODropIn(),
	} {
		data, err := os.ReadFile(filepath.Join(RepoRoot(), path))
		require.NoError(t, err)
		assert.Equal(t, string(data), string(embedded), path)
		assert.NotContains(t, settingLines(string(data)), "version", "%s: kind skips a patch with another version", path)
		for _, line := range settingLines(string(data)) {
			key, _, _ := strings.Cut(strings.TrimSpace(line), " =")
			assert.False(t, socketAndTimeoutKeys[key] || strings.HasPrefix(key, "nri_listen") || strings.Contains(key, "timeout"),
				"%s sets %s: an import overrides the main config's socket and timeouts", path, key)
			assert.NotContains(t, key, "required_plugins", "%s: no node-wide required plugins (they hold back nri-cni's own pod)", path)
		}
	}
}

// TestKindPatchIsTheNodeDropIn: kind-config.yaml's containerd patch is the
// drop-in's setting lines, in order and as written; the comparison skips
// comment and blank lines (kind patches keep comments minimal; the drop-in
// explains itself).
func TestKindPatchIsTheNodeDropIn(t *testing.T) {
	k, err := LoadKindConfig(RepoRoot())
	require.NoError(t, err)
	require.Len(t, k.ContainerdConfigPatches, 1)
	assert.Equal(t, settingLines(string(node.ContainerdDropIn())), settingLines(k.ContainerdConfigPatches[0]),
		"deploy/kind/kind-config.yaml's patch must be deploy/node/containerd/10-nri-cni.toml's lines")
}

// TestHelmChartNodeFiles: the chart's copies (a chart reads only files inside
// its directory) equal deploy/node's, byte for byte.
func TestHelmChartNodeFiles(t *testing.T) {
	for name, want := range map[string][]byte{
		node.ContainerdDropInName: node.ContainerdDropIn(),
		node.CRIODropInName:       node.CRIODropIn(),
	} {
		p := filepath.Join(RepoRoot(), "deploy/helm/nri-cni/files/node", name)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(data), "%s is a copy of deploy/node's (cp deploy/node/*/%s %s)", p, name, filepath.Dir(p))
	}
}
