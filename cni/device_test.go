package cni

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithDeviceGivesEveryPluginTheDevice(t *testing.T) {
	for name, conf := range map[string]string{
		"conflist": `{"cniVersion":"1.0.0","name":"sriov-net","plugins":[{"type":"sriov","vlan":5},{"type":"tuning","sysctl":{}}]}`,
		"conf":     `{"cniVersion":"1.0.0","name":"sriov-net","type":"host-device"}`,
	} {
		t.Run(name, func(t *testing.T) {
			n, err := Parse([]byte(conf))
			require.NoError(t, err)
			before := string(n.List.Bytes)
			d, err := n.WithDevice("0000:3b:02.4")
			require.NoError(t, err)
			assert.Equal(t, before, string(n.List.Bytes), "the shared network is not changed")
			assert.Equal(t, n.Name, d.Name)
			require.Len(t, d.List.Plugins, len(n.List.Plugins))
			for i, p := range d.List.Plugins {
				var m map[string]any
				require.NoError(t, json.Unmarshal(p.Bytes, &m))
				assert.Equal(t, "0000:3b:02.4", m["deviceID"], "plugin %d", i)
				assert.Equal(t, "0000:3b:02.4", m["pciBusID"], "plugin %d", i)
				assert.Equal(t, n.List.Plugins[i].Network.Type, p.Network.Type)
			}
			var list map[string]any
			require.NoError(t, json.Unmarshal(d.List.Bytes, &list), "libcni caches the list's bytes: DEL sees the device too")
			assert.Contains(t, string(d.List.Bytes), `"deviceID":"0000:3b:02.4"`)
		})
	}
	_, err := (&Network{Name: "x"}).WithDevice("a")
	assert.Error(t, err)
}
