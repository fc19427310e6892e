package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// suiteNetwork is the name of the suite's own network (10-<name>.conflist
// in its confDir), for edit functions that list networks.
func suiteNetwork(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "net.d", "10-*.conflist"))
	require.NoError(t, err)
	require.Len(t, m, 1)
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "10-"), ".conflist")
}

// extraNetwork writes another bridge + host-local network into the suite's
// confDir and returns it (its bridge is deleted at the end).
func extraNetwork(t *testing.T, dir string, i int) harness.Secondary {
	t.Helper()
	sec := harness.NewSecondary(dir)
	sec.IPAMDir = filepath.Join(dir, "ipam-extra")
	t.Cleanup(sec.DeleteBridge)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "net.d", "2"+string(rune('0'+i))+"-"+sec.Name+".conflist"), sec.Conflist(), 0o644))
	return sec
}

// TestParallelAttachOnContainerd: parallelAttach on a real containerd: a pod
// gets its three networks (ADDed at once), each in its own subnet, and Stop
// and Remove release all three (DELed at once).
func TestParallelAttachOnContainerd(t *testing.T) {
	var extra []harness.Secondary
	s := newSuite(t, world.ctd, suiteOpts{edit: func(dir string, c *harness.PluginConfig) {
		extra = []harness.Secondary{extraNetwork(t, dir, 1), extraNetwork(t, dir, 2)}
		c.Networks = []string{suiteNetwork(t, dir), extra[0].Name, extra[1].Name}
		c.ParallelAttach = true
	}})
	nets := append([]harness.Secondary{s.net}, extra...)

	id, st := s.mustRun("parallel")
	for i, n := range nets {
		ifname := "net" + string(rune('1'+i))
		itf, ok, err := harness.PodIface(st.NetnsPath, ifname)
		require.NoError(t, err)
		require.True(t, ok, "%s in the pod", ifname)
		_, subnet, _ := net.ParseCIDR(n.Subnet)
		assert.True(t, subnet.Contains(itf.Addrs[0].IP), "%s %s from network %s (%s)", ifname, itf.Addrs[0].String(), n.Name, n.Subnet)
		assert.Len(t, n.IPFilesOf(id), 1, "one address of %s", n.Name)
	}
	require.NoError(t, s.cri.StopPod(s.ctx, id))
	require.NoError(t, s.cri.RemovePod(s.ctx, id))
	for _, n := range nets {
		assert.Empty(t, n.IPFilesOf(id), "%s released", n.Name)
	}
	s.assertNoLeaks()
}

// TestNotReadyNetworkOnContainerd: a network whose plugin answers CNI STATUS
// with "not ready" fails new pods at once with the plugin's message — no
// ADD of any network — and they run once it is ready again (statusInterval
// 1 s here).
func TestNotReadyNetworkOnContainerd(t *testing.T) {
	var down, record string
	s := newSuite(t, world.ctd, suiteOpts{edit: func(dir string, c *harness.PluginConfig) {
		down, record = filepath.Join(dir, "pool-exhausted"), filepath.Join(dir, "status-calls.jsonl")
		require.NoError(t, os.WriteFile(down, nil, 0o600))
		testenv.WriteJSON(t, filepath.Join(dir, "net.d", "30-pool.conflist"), map[string]any{
			"cniVersion": "1.1.0", "name": "pool", "plugins": []any{map[string]any{"type": "cni-recorder", "recordFile": record,
				"ip": "10.98.0.5/24", "failOn": "STATUS", "failWhile": down, "failMsg": "IPAM pool exhausted"}}})
		c.StatusInterval = "1s"
		c.Networks = []string{suiteNetwork(t, dir), "pool"}
	}})

	_, err := s.run(harness.PodSpec{Name: "early"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "network not ready (CNI STATUS)")
	assert.Contains(t, err.Error(), "IPAM pool exhausted", "the plugin's message reaches the pod's error")
	assert.Zero(t, s.count("ADD", ""), "no ADD of the bridge network either")
	for _, c := range testenv.ReadCalls(t, record) {
		assert.NotEqual(t, "ADD", c.Cmd, "no ADD of the pool network while it is not ready")
	}

	require.NoError(t, os.Remove(down))
	ready := time.Now()
	var id string
	testenv.Eventually(t, 30*time.Second, "a pod runs once the network is ready", func() bool {
		id, err = s.run(harness.PodSpec{Name: "later"})
		return err == nil
	})
	t.Logf("pods run again %s after the plugin reported ready", time.Since(ready).Round(time.Millisecond))
	adds := 0
	for _, c := range testenv.ReadCalls(t, record) {
		if c.Cmd == "ADD" && c.ContainerID == id {
			adds++
			assert.Equal(t, "net2", c.IfName)
		}
	}
	assert.Equal(t, 1, adds, "the pool network ADDed as net2 (the recording plugin creates no interface)")
	require.NoError(t, s.cri.StopPod(s.ctx, id))
	require.NoError(t, s.cri.RemovePod(s.ctx, id))
	s.assertNoLeaks()
}
