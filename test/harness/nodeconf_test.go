package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/deploy/node"
)

// requireRoot is testenv.RequireRoot, which this package cannot import
// (testenv imports harness): the tools install runs apt.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (the tools install runs apt); run `sudo make test`")
	}
}

// TestNodeConfHarnessContainerd: the harness's config.toml importing the
// product's drop-in (as the cluster harness does), read back by the real
// containerd (`config dump`): the validator is on, and the harness's private
// NRI socket, plugin dirs and plugin_request_timeout still apply.
func TestNodeConfHarnessContainerd(t *testing.T) {
	requireRoot(t)
	tools, err := EnsureContainerdTools()
	require.NoError(t, err)
	dir := t.TempDir()
	c := &Containerd{daemon: daemon{Address: filepath.Join(dir, "c.sock")}, Dir: dir, NRISocket: filepath.Join(dir, "nri.sock"),
		NRIPluginDir: filepath.Join(dir, "nri-plugins"), NRIConfDir: filepath.Join(dir, "nri-conf.d")}
	o := ContainerdOpts{Dir: dir, Tools: tools, PluginRequestTimeout: 3 * time.Second,
		DropIns: []string{filepath.Join(RepoRoot(), node.ContainerdDropInRepoPath)}}
	cfg := filepath.Join(dir, "config.toml")
	require.NoError(t, writeDropIns(c.ConfDir(), o.DropIns))
	require.NoError(t, os.WriteFile(cfg, []byte(c.config(o)), 0o644))
	out, err := exec.Command(filepath.Join(tools.ContainerdDir, "containerd"), "config", "dump", "--config", cfg).Output()
	require.NoError(t, err)
	dump := string(out)
	for _, want := range []string{
		`(?m)^\s+disable = false$`,
		`(?m)^\s+socket_path = '` + regexp.QuoteMeta(c.NRISocket) + `'$`,
		`(?m)^\s+plugin_path = '` + regexp.QuoteMeta(c.NRIPluginDir) + `'$`,
		`(?m)^\s+plugin_config_path = '` + regexp.QuoteMeta(c.NRIConfDir) + `'$`,
		`(?m)^\s+plugin_request_timeout = '3s'$`,
		`(?m)^\s+\[plugins\.'io\.containerd\.nri\.v1\.nri'\.default_validator\]\n\s+enable = true$`,
		`(?m)^\s+required_plugins = \[\]$`, // per pod only (the annotation), no node-wide list
	} {
		assert.Regexp(t, want, dump)
	}
}

// TestNodeConfHarnessCRIO: the harness's CRI-O dir with the product's drop-in
// (as the cluster harness has it), read back by the real crio (`crio
// config`, no daemon): the validator is on, and crio.conf's private NRI
// socket, plugin dirs and timeout still apply.
func TestNodeConfHarnessCRIO(t *testing.T) {
	requireRoot(t)
	tools, err := EnsureTools()
	require.NoError(t, err)
	dir := t.TempDir()
	c := &CRIO{Dir: dir, NRISocket: filepath.Join(dir, "nri", "nri.sock"), NRIPluginDir: filepath.Join(dir, "nri-plugins"),
		NRIConfDir: filepath.Join(dir, "nri-conf.d"), NamespacesDir: filepath.Join(dir, "ns"), PrimaryIPAMDir: filepath.Join(dir, "ipam"),
		HooksDir: filepath.Join(dir, "hooks.d"), PrimaryNetwork: "criop-test", PrimaryBridge: "criob-test",
		binDir: tools.CRIODir, tools: tools, runc: filepath.Join(tools.RuncDir, "runc")}
	o := CRIOOpts{Dir: dir, Tools: tools, PluginRequestTimeout: 3 * time.Second, LogLevel: "info",
		DropIns: []string{filepath.Join(RepoRoot(), node.CRIODropInRepoPath)}}
	require.NoError(t, c.writeFiles(o))
	cmd := exec.Command(filepath.Join(tools.CRIODir, "crio"), "--config", c.path("crio.conf"), "--config-dir", c.path("crio.conf.d"), "config")
	cmd.Env = c.env()
	out, err := cmd.Output()
	require.NoError(t, err)
	dump := string(out)
	for _, want := range []string{
		`(?m)^nri_listen = "` + regexp.QuoteMeta(c.NRISocket) + `"$`,
		`(?m)^nri_plugin_dir = "` + regexp.QuoteMeta(c.NRIPluginDir) + `"$`,
		`(?m)^nri_plugin_config_dir = "` + regexp.QuoteMeta(c.NRIConfDir) + `"$`,
		`(?m)^nri_plugin_request_timeout = "3s"$`,
		`(?m)^#? ?enable_nri = true$`,
		// crio 1.36.3 prints the validator's table commented out whatever
		// its values (its template compares the defaults with themselves);
		// the values are the effective ones.
		`(?m)^#? ?nri_enable_default_validator = true$`,
	} {
		assert.Regexp(t, want, dump)
	}
}
