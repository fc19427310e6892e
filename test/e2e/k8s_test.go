package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// capsNet is a second network whose chain declares every capability:
// bridge (+host-local "ips"), tuning ("mac"), bandwidth ("bandwidth") and
// the recorder ("portMappings", recorded rather than programmed so the
// host's iptables stay untouched).
func capsNet(t *testing.T, dir, record string) harness.Secondary {
	n := harness.NewSecondary(dir)
	n.IPAMDir = filepath.Join(dir, "ipam-caps")
	t.Cleanup(n.DeleteBridge)
	n.Extra = []map[string]any{
		{"type": "tuning", "capabilities": map[string]bool{"mac": true}},
		{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
		{"type": "cni-recorder", "recordFile": record, "capabilities": map[string]bool{"portMappings": true}},
	}
	var conf map[string]any
	require.NoError(t, json.Unmarshal(n.Conflist(), &conf))
	conf["plugins"].([]any)[0].(map[string]any)["capabilities"] = map[string]bool{"ips": true}
	data, err := json.Marshal(conf)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "net.d", "20-"+n.Name+".conflist"), data, 0o644))
	return n
}

func TestSelectionNamespacesAndCapabilities(t *testing.T) {
	var caps harness.Secondary
	var capsRecord string
	s := newSuite(t, world.ctd, suiteOpts{edit: func(dir string, c *harness.PluginConfig) {
		capsRecord = filepath.Join(dir, "caps-calls.jsonl")
		caps = capsNet(t, dir, capsRecord)
		c.PodSelection = true
		c.PodCapabilities = []string{"bandwidth", "mac", "ips", "portMappings"}
		c.Networks = nil // default: the first config in confDir (the plain secondary)
		c.Namespaces = &struct {
			Include []string `json:"include,omitempty"`
			Exclude []string `json:"exclude,omitempty"`
		}{Exclude: []string{"kube-system"}}
	}})

	// Excluded namespace: nothing.
	_, err := s.run(harness.PodSpec{Name: "sys", Namespace: "kube-system"})
	require.NoError(t, err)
	// Opted out by an empty annotation: nothing.
	_, err = s.run(harness.PodSpec{Name: "optout", Annotations: map[string]string{"nri-cni.io/networks": ""}})
	require.NoError(t, err)
	assert.Zero(t, s.count("ADD", ""))

	// Both networks, the second on eth5, with every capability.
	_, capsSubnet, _ := net.ParseCIDR(caps.Subnet)
	wantIP := capsSubnet.IP.To4()
	wantIP = net.IPv4(wantIP[0], wantIP[1], wantIP[2], 77)
	id, err := s.run(harness.PodSpec{Name: "rich", Annotations: map[string]string{
		"nri-cni.io/networks":             s.net.Name + ", " + caps.Name + "@eth5",
		"nri-cni.io/mac":                  "02:00:00:ab:cd:ef",
		"nri-cni.io/ips":                  wantIP.String() + "/24",
		"kubernetes.io/ingress-bandwidth": "10M",
		"kubernetes.io/egress-bandwidth":  "20M",
		"nri-cni.io/port-mappings":        `[{"hostPort": 18080, "containerPort": 80, "protocol": "TCP"}]`,
	}})
	require.NoError(t, err)
	st, err := s.cri.PodStatus(s.ctx, id)
	require.NoError(t, err)
	require.NotNil(t, s.net1(st.NetnsPath), "the first network on net1")
	eth5, ok, err := harness.PodIface(st.NetnsPath, "eth5")
	require.NoError(t, err)
	require.True(t, ok, "the second network on eth5")
	assert.Equal(t, "02:00:00:ab:cd:ef", eth5.MAC, "mac capability (tuning)")
	require.Len(t, eth5.Addrs, 1)
	assert.True(t, eth5.Addrs[0].IP.Equal(wantIP), "ips capability (host-local): got %s", eth5.Addrs[0].IP)

	// bandwidth: a tbf qdisc on the pod's host-side veth on the caps bridge.
	tbf := 0
	br, err := netlink.LinkByName(caps.Bridge)
	require.NoError(t, err)
	links, err := netlink.LinkList()
	require.NoError(t, err)
	for _, l := range links {
		if l.Attrs().MasterIndex != br.Attrs().Index {
			continue
		}
		qds, err := netlink.QdiscList(l)
		require.NoError(t, err)
		for _, q := range qds {
			if q.Type() == "tbf" {
				tbf++
			}
		}
	}
	assert.Equal(t, 1, tbf, "bandwidth capability: tbf on the host veth")

	calls := testenv.ReadCalls(t, capsRecord)
	require.Len(t, calls, 1)
	assert.Contains(t, string(calls[0].RuntimeConfig), `"hostPort":18080`, "portMappings capability")
	assert.Contains(t, string(calls[0].RuntimeConfig), `"protocol":"tcp"`)

	// Bad annotations fail the pod with an error naming them.
	_, err = s.run(harness.PodSpec{Name: "typo", Annotations: map[string]string{"nri-cni.io/networks": "nope"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nri-cni.io/networks")
	assert.Contains(t, err.Error(), `unknown network "nope"`)
	_, err = s.run(harness.PodSpec{Name: "badmac", Annotations: map[string]string{"nri-cni.io/mac": "zz"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nri-cni.io/mac")

	require.NoError(t, s.cri.StopPod(s.ctx, id))
	require.NoError(t, s.cri.RemovePod(s.ctx, id))
	assert.Empty(t, caps.IPFilesOf(s.own()...))
	s.assertNoLeaks()
}
