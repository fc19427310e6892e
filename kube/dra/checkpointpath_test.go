package dra

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Under the host's root, the kubelet's dir is resolved inside it: a node
// whose /var/lib/kubelet is an absolute symlink (to another disk) has the
// checkpoint there, not under this process's own /data.
func TestCheckpointPathInsideTheHostRoot(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var/lib"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "data/kubelet"), 0o755))
	require.NoError(t, os.Symlink("/data/kubelet", filepath.Join(root, "var/lib/kubelet")))
	data, err := os.ReadFile(filepath.Join("testdata", "kubelet", "v1.37"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "data/kubelet", CheckpointFile), data, 0o600))

	p := checkpointPath(root, "/var/lib/kubelet")
	assert.Equal(t, filepath.Join(root, "data/kubelet", CheckpointFile), p)
	held, err := ReadKubeletClaims(p, DriverName)
	require.NoError(t, err)
	assert.Len(t, held, 2, "the kubelet's claims, read through the symlink inside the root")

	// No host root to read (its init's root closed to this process): the
	// kubelet's dir as this process sees it.
	assert.Equal(t, "/var/lib/kubelet/"+CheckpointFile, checkpointPath(filepath.Join(root, "missing"), "/var/lib/kubelet"))
}
