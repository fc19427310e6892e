package dra

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// checkDeviceName: what every device name must be — a DNS label with room
// for a slot suffix, with the prefix of its kind, the same every time.
func checkDeviceName(t *testing.T, network, name string) {
	t.Helper()
	require.LessOrEqual(t, len(name), maxBaseLen, "room for a slot suffix: %q", name)
	require.Regexp(t, dnsLabel, name, "network %q", network)
	require.Regexp(t, dnsLabel, name+"-127", "network %q: its last slot", network)
	want := "net-"
	if strings.Contains(network, "/") {
		want = "nad-"
	}
	require.True(t, strings.HasPrefix(name, want[:3]+"-"), "%q for %q", name, network)
	require.Equal(t, name, DeviceName(network), "stable")
}

func TestDeviceNameLimits(t *testing.T) {
	long := strings.Repeat("very-long-name.", 17) // 255 characters
	for _, network := range []string{"macvlan1", "team-a/vlan100", "Team_A.net", long, "ns/" + long, "--x--", "___",
		"a", "/", "ns/" + strings.Repeat("x", 253), "日本/ネット"} {
		checkDeviceName(t, network, DeviceName(network))
	}
	assert.True(t, strings.HasPrefix(DeviceName("team-a/vlan100"), "nad-team-a-vlan100-"))
	assert.True(t, strings.HasPrefix(DeviceName("macvlan1"), "net-macvlan1-"))
	assert.NotEqual(t, DeviceName("a.b"), DeviceName("a-b"), "the hash tells apart what the prefix merges")
	assert.GreaterOrEqual(t, len(DeviceName("ns/"+long)), maxBaseLen-1, "as much of the name as fits")
}

// TestOldNamesCollideNewOnesDoNot: the names before issue 28 kept 32 bits
// of hash after a readable part two long NAD names can share, so two
// ordinary NADs of one namespace collided after about 2^16 tries (the issue
// found a pair in ~59,000). Found here the same way, the pair gets two
// names now and both are published; the old name resolves neither.
func TestOldNamesCollideNewOnesDoNot(t *testing.T) {
	prefix := "team-a/" + strings.Repeat("storage-network-of-the-team-", 2)
	seen := map[string]string{}
	var a, b string
	for i := 0; i < 1<<20 && a == ""; i++ {
		network := fmt.Sprintf("%s%d", prefix, i)
		old := legacyDeviceName(network)
		if other, ok := seen[old]; ok {
			a, b = other, network
		}
		seen[old] = network
	}
	require.NotEmpty(t, a, "a collision of the old names")
	t.Logf("old name %s: %s and %s (after %d tries)", legacyDeviceName(a), a, b, len(seen))
	require.NotEqual(t, DeviceName(a), DeviceName(b))

	n := net(t, "x", `{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`)
	inv := BuildInventory([]Candidate{{Network: a, Namespace: "team-a", Net: n}, {Network: b, Namespace: "team-a", Net: n}},
		func(Candidate) error { return nil }, InventoryOptions{Multiple: true, MaxDevices: 10})
	require.Len(t, inv.Devices, 2)
	assert.Empty(t, inv.Skipped)
	_, resolved := inv.Networks[legacyDeviceName(a)]
	assert.False(t, resolved, "an ambiguous old name resolves to neither network")
	assert.Equal(t, "team-a/vlan", BuildInventory([]Candidate{{Network: "team-a/vlan", Namespace: "team-a", Net: n}},
		func(Candidate) error { return nil }, InventoryOptions{Multiple: true, MaxDevices: 10}).Networks[legacyDeviceName("team-a/vlan")],
		"an unambiguous old name still resolves (claims allocated before the upgrade)")
}

func TestNetworkAttr(t *testing.T) {
	assert.Equal(t, "team-a/vlan", NetworkAttr("team-a/vlan"))
	exact := "team-a/" + strings.Repeat("x", 57)
	assert.Equal(t, exact, NetworkAttr(exact), "64 bytes fit")
	long := "team-a/" + strings.Repeat("x", 200)
	got := NetworkAttr(long)
	assert.Len(t, got, 64)
	assert.True(t, strings.HasPrefix(got, "team-a/xxxx"), got)
	assert.Contains(t, got, "#")
	assert.NotEqual(t, got, NetworkAttr(long+"y"))
}

func TestValidDevice(t *testing.T) {
	s := func(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(v)} }
	ver := func(v string) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	many := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for i := range 33 {
		many[resourceapi.QualifiedName(fmt.Sprintf("a%d", i))] = s("x")
	}
	for _, tc := range []struct {
		name string
		dev  resourceapi.Device
		msg  string
	}{
		{"ok", resourceapi.Device{Name: "net-a-1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"network": s(strings.Repeat("x", 64)), "cniVersion": ver("1.1.0"), "shared": {BoolValue: ptr.To(true)}}}, ""},
		{"name too long", resourceapi.Device{Name: strings.Repeat("a", 64)}, "not a DNS label"},
		{"name not a label", resourceapi.Device{Name: "Net_A"}, "not a DNS label"},
		{"string too long", resourceapi.Device{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"network": s(strings.Repeat("x", 65))}}, "65 bytes, more than 64"},
		{"version with a v", resourceapi.Device{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"cniVersion": ver("v1.0.0")}}, "not a semantic version"},
		{"too many attributes", resourceapi.Device{Name: "d", Attributes: many}, "33 attributes and capacities, more than 32"},
		{"bad attribute name", resourceapi.Device{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"nri-cni.io/not-an-id": s("x")}}, "not valid"},
		{"no value", resourceapi.Device{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"x": {}}}, "no value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validDevice(tc.dev)
			if tc.msg == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.msg)
		})
	}
}

// fuzzNames remembers, across one fuzzing run, which network each device
// name and network attribute came from (bounded): distinct networks must
// never share one.
var fuzzNames = struct {
	sync.Mutex
	names, attrs map[string]string
}{names: map[string]string{}, attrs: map[string]string{}}

// FuzzDeviceName: whatever a NAD's or network's name, its device name is a
// DNS label with room for a slot suffix, the same every time, and no other
// network's; its network attribute fits an attribute and is no other
// network's either. The seeds run with `go test`.
func FuzzDeviceName(f *testing.F) {
	for _, seed := range []string{"", "a", "macvlan1", "team-a/vlan100", "Team_A.net", "--x--", "ns/" + strings.Repeat("x", 253),
		strings.Repeat("very-long-name.", 17), "日本/ネット", "a/b/c", "ns/a.b", "ns/a-b", "\x00", "team-a/#1234",
		"team-a/" + strings.Repeat("storage-network-of-the-team-", 2) + "1"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, network string) {
		name := DeviceName(network)
		checkDeviceName(t, network, name)
		attr := NetworkAttr(network)
		require.LessOrEqual(t, len(attr), maxAttrValueLen)
		require.True(t, utf8.ValidString(attr), "%q", attr)
		if len(network) <= maxAttrValueLen && utf8.ValidString(network) {
			require.Equal(t, network, attr)
		}
		fuzzNames.Lock()
		defer fuzzNames.Unlock()
		if other, ok := fuzzNames.names[name]; ok && other != network {
			t.Fatalf("device name %s: networks %q and %q", name, other, network)
		}
		if other, ok := fuzzNames.attrs[attr]; ok && other != network {
			t.Fatalf("network attribute %q: networks %q and %q", attr, other, network)
		}
		if len(fuzzNames.names) < 1<<16 {
			fuzzNames.names[name], fuzzNames.attrs[attr] = network, network
		}
	})
}
