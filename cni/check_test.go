package cni

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithoutHostMACs(t *testing.T) {
	in := []byte(`{"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"br0","prevResult":{"cniVersion":"1.0.0",
		"interfaces":[{"name":"br0","mac":"aa:aa:aa:aa:aa:aa"},{"name":"veth1","mac":"bb:bb:bb:bb:bb:bb"},
		{"name":"net1","mac":"cc:cc:cc:cc:cc:cc","sandbox":"/run/netns/p"}],"ips":[{"address":"10.1.0.5/24","interface":2}]}}`)
	var got struct {
		Bridge     string `json:"bridge"`
		PrevResult struct {
			Interfaces []map[string]string `json:"interfaces"`
			IPs        []map[string]any    `json:"ips"`
		} `json:"prevResult"`
	}
	require.NoError(t, json.Unmarshal(withoutHostMACs(in), &got))
	assert.Equal(t, "br0", got.Bridge, "the rest of the config as it was")
	assert.Equal(t, []map[string]string{{"name": "br0"}, {"name": "veth1"},
		{"name": "net1", "mac": "cc:cc:cc:cc:cc:cc", "sandbox": "/run/netns/p"}}, got.PrevResult.Interfaces,
		"host-side MACs dropped, the pod's kept")
	assert.Len(t, got.PrevResult.IPs, 1)

	for _, same := range []string{`{"cniVersion":"1.0.0","name":"n"}`, `not json`,
		`{"prevResult":{"interfaces":[{"name":"net1","mac":"cc:cc:cc:cc:cc:cc","sandbox":"/p"}]}}`} {
		assert.Equal(t, same, string(withoutHostMACs([]byte(same))))
	}
	assert.True(t, isCheck([]string{"CNI_PATH=/x", "CNI_COMMAND=CHECK"}))
	assert.False(t, isCheck([]string{"CNI_COMMAND=ADD"}))
}
