package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
)

// The running nri-cni's check of the node is what `nri-cni status` shows:
// fail-open names the files checked and the fix.
func TestNodeCheckSavedForStatus(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/containerd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/containerd/config.toml"), []byte("version = 3\n"), 0o644))
	cfg := config.Default()
	cfg.FailClosed.NodeRoot = root
	rep := checkNode(cfg, "containerd", "v2.4.2")
	require.False(t, rep.OK(), "no validator in the config")

	state := t.TempDir()
	var out bytes.Buffer
	printNodeCheck(&out, state)
	assert.Contains(t, out.String(), "fail-closed: unknown: nri-cni has not connected")
	require.NoError(t, saveNodeCheck(state, rep, time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)))
	out.Reset()
	printNodeCheck(&out, state)
	assert.Contains(t, out.String(), "fail-closed (checked 2026-11-27T12:00:00Z): containerd v2.4.2: not set up")
	assert.Contains(t, out.String(), "/etc/containerd/config.toml")
	assert.Contains(t, out.String(), "node-setup")
	entries, err := os.ReadDir(state)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp file left")
	assert.Equal(t, nodeCheckFile, entries[0].Name(), "hidden: never taken for a record")
}
