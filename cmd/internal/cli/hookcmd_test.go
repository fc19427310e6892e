package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHookWithoutConfDir: `nri-cni hook` as a hooks.d entry runs it for every
// container, also before the admin created confDir: a container that asks
// for no network starts (createRuntime and poststop exit 0). The plugin
// (`run`) still refuses to start without confDir, naming it.
func TestHookWithoutConfDir(t *testing.T) {
	dir := t.TempDir()
	confDir := filepath.Join(dir, "net.d") // never created
	cfgPath := filepath.Join(dir, "nri.conf")
	require.NoError(t, os.WriteFile(cfgPath, []byte("confDir: "+confDir+"\nstateDir: "+filepath.Join(dir, "state")+
		"\ncacheDir: "+filepath.Join(dir, "cache")+"\nlogFile: "+filepath.Join(dir, "nri-cni.log")+"\n"), 0o644))
	// A container sharing the host's network namespace: createRuntime
	// needs no namespace of its own to get this far (no root).
	bundle := filepath.Join(dir, "bundle")
	require.NoError(t, os.MkdirAll(bundle, 0o755))
	spec, err := json.Marshal(specs.Spec{Version: specs.Version, Linux: &specs.Linux{}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o644))

	hook := func(status specs.ContainerState) (int, string) {
		st, err := json.Marshal(specs.State{Version: specs.Version, ID: "c1", Status: status, Pid: os.Getpid(), Bundle: bundle})
		require.NoError(t, err)
		var stdout, stderr bytes.Buffer
		a := &app{stdin: bytes.NewReader(st), stdout: &stdout, stderr: &stderr, getenv: os.Getenv}
		return a.run(context.Background(), []string{"hook", "--config", cfgPath}), stderr.String()
	}
	code, stderr := hook(specs.StateCreating)
	assert.Equal(t, 0, code, "createRuntime: %s", stderr)
	code, stderr = hook(specs.StateStopped)
	assert.Equal(t, 0, code, "poststop: %s", stderr)
	log, err := os.ReadFile(filepath.Join(dir, "nri-cni.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), "confDir does not exist")

	code, _, stderr = runApp(t, nil, "run", "--config", cfgPath, "--socket", filepath.Join(dir, "nri.sock"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, confDir)
	assert.Contains(t, stderr, "does not exist")
}
