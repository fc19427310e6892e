package dra

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
)

func net(t *testing.T, name, plugin string) *cni.Network {
	t.Helper()
	n, err := cni.Parse([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[%s]}`, name, plugin)))
	require.NoError(t, err)
	return n
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func TestDeviceName(t *testing.T) {
	long := strings.Repeat("very-long-name.", 10)
	for _, network := range []string{"macvlan1", "team-a/vlan100", "Team_A.net", long, "ns/" + long, "--x--"} {
		name := DeviceName(network)
		assert.Regexp(t, dnsLabel, name, network)
		assert.LessOrEqual(t, len(name)+4, 63, "room for a slot suffix: %s", name)
		assert.Equal(t, name, DeviceName(network), "stable")
	}
	assert.True(t, strings.HasPrefix(DeviceName("team-a/vlan100"), "nad-team-a-vlan100-"))
	assert.True(t, strings.HasPrefix(DeviceName("macvlan1"), "net-macvlan1-"))
	assert.NotEqual(t, DeviceName("a.b"), DeviceName("a-b"), "the hash tells apart what the prefix merges")
}

func TestPoolSize(t *testing.T) {
	for _, tc := range []struct {
		ipam string
		want int
	}{
		{`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}`, 253},
		{`{"type":"host-local","subnet":"10.1.0.0/28"}`, 13},
		{`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.10","rangeEnd":"10.1.0.19"}]]}`, 10},
		{`{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"},{"subnet":"10.2.0.0/29"}],[{"subnet":"fd00::/124"}]]}`, 10},
		{`{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/8"}]]}`, 1<<24 - 3},
		{`{"type":"host-local","ranges":[[{"subnet":"fd00::/64"}]]}`, unknownPool},
		{`{"type":"whereabouts","range":"10.1.0.0/30"}`, unknownPool},
		{`{"type":"host-local","ranges":[[{"subnet":"bogus"}]]}`, 0},
	} {
		n := net(t, "x", `{"type":"bridge","ipam":`+tc.ipam+`}`)
		assert.Equal(t, tc.want, PoolSize(n), tc.ipam)
	}
}

func TestBuildInventory(t *testing.T) {
	small := net(t, "small", `{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/29"}}`)
	big := net(t, "big", `{"type":"macvlan","master":"eth9","ipam":{"type":"host-local","subnet":"10.2.0.0/16"}}`)
	nad := net(t, "cni-red", `{"type":"ipvlan","ipam":{"type":"static"}}`)
	cands := []Candidate{
		{Network: "small", Net: small, Local: true},
		{Network: "big", Net: big, Local: true},
		{Network: "team/red", Namespace: "team", Net: nad},
		{Network: "team/refused", Namespace: "team", Err: errors.New("refused by kubernetes.nadPolicy")},
	}
	ok := func(Candidate) error { return nil }

	multi := BuildInventory(cands, ok, InventoryOptions{Multiple: true, Slots: 16, MaxDevices: 100})
	require.Len(t, multi.Devices, 3)
	for _, d := range multi.Devices {
		require.NotNil(t, d.AllowMultipleAllocations)
		assert.True(t, *d.AllowMultipleAllocations)
	}
	red := multi.Devices[2]
	assert.Equal(t, "team/red", *red.Attributes[AttrNetwork].StringValue)
	assert.Equal(t, SourceNAD, *red.Attributes[AttrSource].StringValue)
	assert.Equal(t, "team", *red.Attributes[AttrNamespace].StringValue)
	assert.Equal(t, "ipvlan", *red.Attributes[AttrType].StringValue)
	assert.Equal(t, "1.1.0", *red.Attributes[AttrCNIVersion].VersionValue)
	assert.Equal(t, SourceNode, *multi.Devices[0].Attributes[AttrSource].StringValue)
	require.Len(t, multi.Skipped, 1)
	assert.Contains(t, multi.Skipped[0].Reason, "nadPolicy")

	slots := BuildInventory(cands, ok, InventoryOptions{Slots: 16, MaxDevices: 100})
	counts := map[string]int{}
	for _, d := range slots.Devices {
		assert.Nil(t, d.AllowMultipleAllocations)
		counts[slots.Networks[d.Name]]++
	}
	assert.Equal(t, map[string]int{"small": 5, "big": 16, "team/red": 16}, counts, "slots: at most Slots, at most the pool's addresses")
	n, ok2 := slots.Networks[DeviceName("small")]
	assert.True(t, ok2)
	assert.Equal(t, "small", n, "the base name resolves too")

	limited := BuildInventory(cands, ok, InventoryOptions{Slots: 16, MaxDevices: 20})
	assert.Len(t, limited.Devices, 5+0)
	var reasons []string
	for _, s := range limited.Skipped {
		reasons = append(reasons, s.Network+": "+s.Reason)
	}
	assert.Contains(t, reasons, "big: kubernetes.dra.maxDevices (20) reached")

	checked := 0
	failing := BuildInventory(cands, func(c Candidate) error {
		checked++
		if c.Network == "big" {
			return errors.New(`macvlan "master": host interface "eth9": Link not found`)
		}
		return nil
	}, InventoryOptions{Multiple: true, Slots: 16, MaxDevices: 2})
	assert.Len(t, failing.Devices, 2)
	assert.Equal(t, 3, checked, "the refused NAD is not checked")
}

func TestChecker(t *testing.T) {
	mac := net(t, "m", `{"type":"macvlan","master":"eth9"},{"type":"tuning"}`)
	missing := errors.New("not found")
	for _, tc := range []struct {
		name string
		k    Checker
		msg  string
	}{
		{name: "ok", k: Checker{FindPlugin: func(string) error { return nil }, LinkExists: func(string) error { return nil }}},
		{name: "plugin missing", k: Checker{FindPlugin: func(typ string) error {
			if typ == "tuning" {
				return missing
			}
			return nil
		}}, msg: `plugin "tuning": not found`},
		{name: "master missing", k: Checker{LinkExists: func(name string) error { return fmt.Errorf("%s: %w", name, missing) }},
			msg: `macvlan "master": host interface "eth9"`},
		{name: "not ready", k: Checker{NotReady: func(Candidate) error { return errors.New("daemon down") }},
			msg: "not ready (CNI STATUS): daemon down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.k.Check(Candidate{Network: "m", Net: mac})
			if tc.msg == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}
