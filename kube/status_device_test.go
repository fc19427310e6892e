package kube

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
)

// A device-backed network's entry carries its NPWG device-info, under the
// key the NPWG client library reads ("device-info"); others none.
func TestNetworkStatusCarriesDeviceInfo(t *testing.T) {
	info := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.1"}}`
	out, err := NetworkStatusJSON(attach.PodNetworks{Namespace: "ns1", Name: "p", Networks: []attach.NetworkStatus{
		{Name: "default", Interface: "eth0", Default: true},
		{Name: "ns1/sriov-a", Interface: "net1", DeviceInfo: []byte(info)},
	}})
	require.NoError(t, err)
	var entries []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &entries))
	require.Len(t, entries, 2)
	assert.NotContains(t, entries[0], "device-info")
	assert.JSONEq(t, info, string(entries[1]["device-info"]))
}
