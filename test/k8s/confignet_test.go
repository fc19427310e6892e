package k8s

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// reloadedMsg is what nri-cni logs after each reload of confDir.
const reloadedMsg = `msg="CNI configs reloaded"`

// TestConfigMapNetworkAddedLive: deploy/base's ConfigMap says every key but
// nri.conf is a network in confDir, reloaded live. A key added through the
// API (as `kubectl edit configmap` does) becomes a network nri-cni loads
// without a restart — the kubelet updates the whole-ConfigMap volume, nri-cni
// sees the change — and a pod asking for it gets net1 on it; the key
// removed, the network is unloaded. nri.conf, in the same directory, is
// never taken for a broken network.
func TestConfigMapNetworkAddedLive(t *testing.T) {
	f := newFixture(t)
	d := f.w.d
	netName, bridge, subnet := harness.RandomName("cm-net-"), harness.RandomName("cmn-"), k8sdeploy.NADSubnet()
	key := "50-" + netName + ".conflist"
	cms := f.k.CoreV1().ConfigMaps("kube-system")
	setKey := func(value any) {
		t.Helper()
		patch, err := json.Marshal(map[string]any{"data": map[string]any{key: value}})
		require.NoError(t, err)
		_, err = cms.Patch(f.ctx, "nri-cni", types.MergePatchType, patch, metav1.PatchOptions{})
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		patch, _ := json.Marshal(map[string]any{"data": map[string]any{key: nil}})
		_, _ = cms.Patch(f.ctx, "nri-cni", types.MergePatchType, patch, metav1.PatchOptions{})
		_ = deleteLink(bridge)
	})
	// The DaemonSet's pod and its container's restarts: the same after.
	instance := func() string {
		t.Helper()
		pods, err := d.Pods(f.ctx)
		require.NoError(t, err)
		require.Len(t, pods, 1)
		restarts := int32(0)
		for _, cs := range pods[0].Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		return fmt.Sprintf("%s restarts %d", pods[0].UID, restarts)
	}
	before := instance()
	reloads := func() []string {
		log, err := d.ReadLog(f.ctx)
		if err != nil {
			return nil
		}
		var out []string
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, reloadedMsg) {
				out = append(out, l)
			}
		}
		return out
	}
	waitReload := func(what string, seen int, want bool) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := start.Add(waitLong)
		for {
			lines := reloads()
			if len(lines) > seen && strings.Contains(lines[len(lines)-1], netName) == want {
				t.Logf("%s: %s", what, lines[len(lines)-1])
				return time.Since(start)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no reload within %s (reloads logged: %d, last %q)", what, waitLong, len(lines), lines)
			}
			time.Sleep(time.Second)
		}
	}

	seen := len(reloads())
	added := time.Now()
	setKey(bridgeConfig(netName, bridge, subnet))
	took := waitReload("the added key loaded", seen, true)
	t.Logf("network %s loaded %s after the ConfigMap patch (the kubelet's volume update and nri-cni's reload)",
		netName, took.Round(time.Millisecond))
	assert.Equal(t, before, instance(), "no restart: the same nri-cni pod and container")

	name := harness.RandomName("cm-pod-")
	f.create(f.pod(name, "default", map[string]string{k8sdeploy.Annotation: netName}))
	p := f.waitReady("default", name)
	id, st := f.readySandbox(p)
	addr, ok := f.net1(st.NetnsPath)
	require.True(t, ok, "net1 from the added network")
	_, cidr, err := net.ParseCIDR(subnet)
	require.NoError(t, err)
	ip, _, err := net.ParseCIDR(addr)
	require.NoError(t, err)
	assert.True(t, cidr.Contains(ip), "net1 %s in the added network's subnet %s", addr, subnet)
	t.Logf("pod %s: net1 %s on %s, %s after the ConfigMap patch", name, addr, bridge, time.Since(added).Round(time.Millisecond))
	assert.NotEmpty(t, f.w.o.IPFilesOf(netName, id), "host-local's address file of the added network")

	f.deletePod("default", name)
	f.waitReleased(id)
	f.waitFor("the added network's address released", waitLong, func() (bool, string) {
		left := f.w.o.IPFilesOf(netName, id)
		return len(left) == 0, fmt.Sprint(left)
	})

	seen = len(reloads())
	setKey(nil)
	took = waitReload("the removed key unloaded", seen, false)
	t.Logf("network %s unloaded %s after the key was removed", netName, took.Round(time.Millisecond))

	log, err := d.ReadLog(f.ctx)
	require.NoError(t, err)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "skipping invalid CNI config") {
			assert.NotContains(t, l, "nri.conf", "nri.conf is not a network")
		}
	}
}
