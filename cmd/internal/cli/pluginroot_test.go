package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pluginRoot whose /proc does not show nri-cni's own PIDs is refused by
// every command that runs plugins in it, naming the key and the fix
// (hostPID). Here the root has no /proc at all; a PID namespace of its own
// is test/integration's TestPluginRootNeedsHostPID.
func TestPluginRootRefusedWithoutTheHostsPIDs(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "host")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "opt/cni/bin"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "net.d"), 0o755)) // all else is in order
	cfg := filepath.Join(dir, "nri.conf")
	require.NoError(t, os.WriteFile(cfg, []byte("pluginRoot: "+root+"\nstateDir: "+filepath.Join(dir, "state")+
		"\nconfDir: "+filepath.Join(dir, "net.d")+"\ncacheDir: "+filepath.Join(dir, "cache")+"\n"), 0o644))
	for _, args := range [][]string{{"gc", "--config", cfg}, {"hook", "--config", cfg, "createRuntime"}} {
		code, _, stderr := runApp(t, nil, args...)
		assert.Equal(t, 1, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "pluginRoot "+root+": ", args)
		assert.Contains(t, stderr, "cannot tell whether nri-cni sees the host's PIDs", args)
		assert.Contains(t, stderr, "hostPID: true", args)
	}
}
