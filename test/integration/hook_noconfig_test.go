package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestRuncHooksDWithoutConfDir: the shipped hooks.d entry (it matches every
// container) on a node where nri.conf's confDir was never created, as after
// the old quick start, run by a real runc 1.5.2. A container that asks for
// no network runs (with `networks: []`, the first config of an empty or
// missing dir is no network); one that names a network with its annotation
// (podSelection) fails at createRuntime with a message naming the network,
// the dir and that it does not exist; nothing leaks either way.
func TestRuncHooksDWithoutConfDir(t *testing.T) {
	e := newHookEnv(t, nil)
	e.cfg.ConfDir = filepath.Join(e.dir, "never-created")
	require.NoError(t, e.cfg.Write(e.cfgPath))
	hooks, _ := e.shippedHooks("nri-cni.json")
	run := func(name string, ann map[string]string, args ...string) (string, error) {
		id := harness.RandomName("c")
		b := testenv.BusyboxBundle(t, e.runc, filepath.Join(e.dir, name), args, hooks, func(s *specs.Spec) { s.Annotations = ann })
		var out bytes.Buffer
		cmd := e.runcCmd(id, "run", "--bundle", b, id)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}

	out, err := run("nothing", nil, "sh", "-c", "echo started; ip -o link")
	require.NoError(t, err, "a container asking for nothing starts: %s", out)
	assert.Contains(t, out, "started")
	assert.NotContains(t, out, "net1")
	assert.Contains(t, e.cfg.Log(), "confDir does not exist")
	assert.Contains(t, e.cfg.Log(), "nothing to attach")

	e.cfg.PodSelection = true
	require.NoError(t, e.cfg.Write(e.cfgPath))
	out, err = run("named", map[string]string{plan.AnnotationNetworks: e.net.Name}, "echo", "should not run")
	require.Error(t, err, "a container naming a network that is not there fails closed")
	// runc quotes the hook's stderr in its own log line.
	assert.Contains(t, out, `unknown network \"`+e.net.Name+`\"`)
	assert.Contains(t, out, e.cfg.ConfDir+" does not exist")
	assert.NotContains(t, out, "should not run")

	out, err = run("opted-out", map[string]string{plan.AnnotationNetworks: ""}, "echo", "started")
	require.NoError(t, err, "an empty annotation opts out: %s", out)

	// An empty confDir: the same for a container asking for nothing.
	require.NoError(t, os.MkdirAll(e.cfg.ConfDir, 0o755))
	e.cfg.PodSelection = false
	require.NoError(t, e.cfg.Write(e.cfgPath))
	out, err = run("empty", nil, "echo", "started")
	require.NoError(t, err, "confDir empty: %s", out)
	e.assertNoLeaks()
	assert.Equal(t, 1, strings.Count(e.cfg.Log(), "attach failed"), "only the named network's attach failed:\n%s", e.cfg.Log())
}
