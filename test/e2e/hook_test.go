package e2e

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestCtrRunWithHooks: `ctr run --config spec.json` (no CRI, so no NRI
// events) against the test containerd; nri-cni serves it as an OCI hook.
func TestCtrRunWithHooks(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sec, cfg, cfgPath := pluginSetup(t, dir)

	runc := filepath.Join(world.tools.RuncDir, "runc")
	bundleDir := filepath.Join(dir, "bundle")
	id := harness.RandomName("ctr")
	b := testenv.BusyboxBundle(t, runc, bundleDir, []string{"sh", "-c", "ip -4 addr show dev net1"},
		testenv.NRICNIHooks(world.bin, cfgPath), func(s *specs.Spec) {
			s.Root.Path = filepath.Join(bundleDir, "rootfs") // ctr takes the whole spec: absolute rootfs
			// Its own cgroup, which runc removes with it (containerd's
			// default, /<namespace>/<id>, leaves /<namespace> behind).
			s.Linux.CgroupsPath = "/" + id
		})
	ctr := filepath.Join(world.tools.ContainerdDir, "ctr")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, ctr, "--address", world.ctd.Address, "-n", "nri-cni-e2e", "run", "--rm",
		"--config", filepath.Join(b, "config.json"), id)
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() {
		_ = exec.Command(ctr, "--address", world.ctd.Address, "-n", "nri-cni-e2e", "task", "kill", "-s", "KILL", id).Run()
		_ = exec.Command(ctr, "--address", world.ctd.Address, "-n", "nri-cni-e2e", "container", "rm", id).Run()
		if t.Failed() {
			t.Logf("nri-cni log:\n%s", cfg.Log())
		}
	})
	require.NoError(t, cmd.Run(), "ctr run: %s", out.String())

	m := regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/24`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "the container sees net1 with an address:\n%s", out.String())
	_, subnet, _ := net.ParseCIDR(sec.Subnet)
	assert.True(t, subnet.Contains(net.ParseIP(m[1])))
	// --rm deleted the task: poststop ran and released everything.
	assert.Empty(t, sec.IPFiles(), "IP released")
	assert.Empty(t, cfg.StateFiles(), "record gone")
	assert.Empty(t, cfg.CacheFiles(), "cache entry gone")
}
