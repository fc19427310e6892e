package dra

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

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

// bridgeNet is a NAD's network: a bridge with a /24 host-local pool (16
// slots).
func bridgeNet(t *testing.T, name string) *cni.Network {
	t.Helper()
	return net(t, name, `{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`)
}

func nad(t *testing.T, ns, name string) Candidate {
	return Candidate{Network: ns + "/" + name, Namespace: ns, Net: bridgeNet(t, name)}
}

func publishedNets(inv Inventory) map[string]int {
	out := map[string]int{}
	for _, d := range inv.Devices {
		out[inv.Networks[d.Name]]++
	}
	return out
}

func skipsOf(inv Inventory, class string) []string {
	var out []string
	for _, s := range inv.Skipped {
		if s.Class == class {
			out = append(out, s.Network)
		}
	}
	return out
}

// Issue 28, item 1: a NAD whose namespace/name is longer than a device
// attribute holds (64 bytes) made every node's slice invalid. Now every
// device fits the API's limits: the long one is published under a
// shortened network attribute, a NAD whose plugin type cannot be an
// attribute is left out (and said so), and the other networks go on.
func TestLongNamesDoNotBreakTheSlice(t *testing.T) {
	long := nad(t, "team-a", strings.Repeat("n", 200))
	badType := Candidate{Network: "team-a/odd", Namespace: "team-a",
		Net: net(t, "odd", fmt.Sprintf(`{"type":%q}`, strings.Repeat("t", 100)))}
	vPrefix := Candidate{Network: "team-b/v", Namespace: "team-b",
		Net: func() *cni.Network {
			n, err := cni.Parse([]byte(`{"cniVersion":"v1.0.0","name":"v","plugins":[{"type":"bridge"}]}`))
			require.NoError(t, err)
			return n
		}()}
	cands := []Candidate{{Network: "secondary", Net: bridgeNet(t, "secondary"), Local: true}, long, badType,
		nad(t, "team-b", "storage"), vPrefix}
	for _, multiple := range []bool{true, false} {
		inv := BuildInventory(cands, func(Candidate) error { return nil }, InventoryOptions{Multiple: multiple, Slots: 16, MaxDevices: 512})
		for _, d := range inv.Devices {
			require.NoError(t, validDevice(d), "every device is one the API server accepts")
		}
		got := publishedNets(inv)
		assert.Contains(t, got, long.Network, "the long NAD is published")
		assert.Contains(t, got, "team-b/storage", "the others go on")
		assert.Contains(t, got, "secondary")
		assert.Contains(t, got, "team-b/v")
		assert.Equal(t, []string{"team-a/odd"}, skipsOf(inv, SkipAPILimits))
		for _, d := range inv.Devices {
			if inv.Networks[d.Name] == long.Network {
				attr := *d.Attributes[AttrNetwork].StringValue
				assert.Equal(t, NetworkAttr(long.Network), attr)
				assert.Len(t, attr, 64)
			}
			if inv.Networks[d.Name] == "team-b/v" {
				assert.Equal(t, "0.0.0", *d.Attributes[AttrCNIVersion].VersionValue, "v1.0.0 is not a semantic version for the API")
			}
		}
	}
}

// Item 6: every device has every attribute (node networks an empty
// namespace), so a selector on namespace or cniVersion needs no guard.
func TestEveryDeviceHasEveryAttribute(t *testing.T) {
	shared := nad(t, "infra", "uplink")
	shared.Shared = true
	noVersion := Candidate{Network: "plain", Local: true, Net: func() *cni.Network {
		n, err := cni.Parse([]byte(`{"name":"plain","type":"bridge"}`))
		require.NoError(t, err)
		return n
	}()}
	inv := BuildInventory([]Candidate{{Network: "secondary", Net: bridgeNet(t, "secondary"), Local: true}, noVersion, shared,
		nad(t, "team-a", "storage")}, func(Candidate) error { return nil }, InventoryOptions{Multiple: true, MaxDevices: 10})
	require.Len(t, inv.Devices, 4)
	want := map[string][4]string{ // namespace, source, shared, cniVersion
		"secondary":      {"", SourceNode, "true", "1.1.0"},
		"plain":          {"", SourceNode, "true", "0.0.0"},
		"infra/uplink":   {"infra", SourceNAD, "true", "1.1.0"},
		"team-a/storage": {"team-a", SourceNAD, "false", "1.1.0"},
	}
	for _, d := range inv.Devices {
		a := d.Attributes
		require.Len(t, a, 6, d.Name)
		for _, k := range []resourceapi.QualifiedName{AttrNetwork, AttrSource, AttrNamespace, AttrType} {
			require.NotNil(t, a[k].StringValue, "%s: %s", d.Name, k)
		}
		require.NotNil(t, a[AttrShared].BoolValue)
		require.NotNil(t, a[AttrCNIVersion].VersionValue)
		w := want[inv.Networks[d.Name]]
		assert.Equal(t, w, [4]string{*a[AttrNamespace].StringValue, *a[AttrSource].StringValue,
			fmt.Sprint(*a[AttrShared].BoolValue), *a[AttrCNIVersion].VersionValue}, inv.Networks[d.Name])
	}
}

// Item 2: two networks with one device name or one network attribute are
// never both published: the later (node networks first, then NADs by name,
// the same on every node) is left out and said so.
func TestDuplicatesAreLeftOut(t *testing.T) {
	b := &builder{o: InventoryOptions{MaxDevices: 10}}
	mk := func(network, base, attr string) *prepared {
		return &prepared{c: Candidate{Network: network}, base: base, n: 1,
			attrs: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{AttrNetwork: {StringValue: ptr.To(attr)}}}
	}
	first, sameName, sameAttr, other := mk("a/x", "nad-x", "a/x"), mk("a/y", "nad-x", "a/y"), mk("b/z", "nad-z", "a/x"), mk("c/w", "nad-w", "c/w")
	b.dedupe([]*prepared{first, sameName, sameAttr, other})
	assert.Empty(t, first.skip)
	assert.Equal(t, SkipDuplicate, sameName.skip)
	assert.Contains(t, sameName.reason, "its device name nad-x is that of network a/x")
	assert.Equal(t, SkipDuplicate, sameAttr.skip)
	assert.Contains(t, sameAttr.reason, `its network attribute "a/x" is that of network a/x`)
	assert.Empty(t, other.skip)
}

// Item 3: the NADs share the device budget fairly among namespaces. In
// slots mode a /24 NAD takes 16 devices: 40 NADs of a namespace that sorts
// first took the whole budget before; now every namespace gets its NADs
// published up to its share, and the namespace with many only what is left.
func TestFairShareAcrossNamespaces(t *testing.T) {
	var cands []Candidate
	cands = append(cands, Candidate{Network: "secondary", Net: bridgeNet(t, "secondary"), Local: true})
	for i := range 40 {
		cands = append(cands, nad(t, "aaa-greedy", fmt.Sprintf("net-%02d", i)))
	}
	cands = append(cands, nad(t, "mmm", "one"), nad(t, "zzz", "one"), nad(t, "zzz", "two"))
	ok := func(Candidate) error { return nil }
	count := func(inv Inventory) map[string]int {
		out := map[string]int{}
		for _, d := range inv.Devices {
			out[*d.Attributes[AttrNamespace].StringValue]++
		}
		return out
	}

	// No per-namespace cap: max-min fairness alone.
	inv := BuildInventory(cands, ok, InventoryOptions{Slots: 16, MaxDevices: 512})
	assert.Equal(t, map[string]int{"": 16, "mmm": 16, "zzz": 32, "aaa-greedy": 448}, count(inv))
	assert.Len(t, skipsOf(inv, SkipMaxDevices), 12, "the greedy namespace's last NADs")
	for _, n := range skipsOf(inv, SkipMaxDevices) {
		assert.True(t, strings.HasPrefix(n, "aaa-greedy/"), n)
	}

	// With the cap: at most 128 devices (8 NADs) of a namespace.
	inv = BuildInventory(cands, ok, InventoryOptions{Slots: 16, MaxDevices: 512, MaxPerNamespace: 128})
	assert.Equal(t, map[string]int{"": 16, "mmm": 16, "zzz": 32, "aaa-greedy": 128}, count(inv))
	assert.Len(t, skipsOf(inv, SkipNamespaceShare), 32)
	for _, s := range inv.Skipped {
		assert.Contains(t, s.Reason, "kubernetes.dra.maxDevicesPerNamespace (128)")
	}

	// A budget too small for all: max-min — each namespace one NAD before
	// any gets a second; which namespace a tie leaves out depends on the
	// node (Seed), so the fleet as a whole publishes every namespace.
	missing := map[string]bool{}
	for i := range 20 {
		inv = BuildInventory(cands, ok, InventoryOptions{Slots: 16, MaxDevices: 48, Seed: fmt.Sprintf("node-%d", i)})
		got := count(inv)
		assert.Equal(t, 16, got[""], "node networks first")
		assert.Len(t, got, 3, "the node network and two namespaces, one NAD each")
		for _, ns := range []string{"aaa-greedy", "mmm", "zzz"} {
			if got[ns] == 0 {
				missing[ns] = true
			}
			assert.LessOrEqual(t, got[ns], 16)
		}
	}
	assert.Len(t, missing, 3, "each namespace left out on some node, never the same one everywhere")
}

// Item 5: a namespace's NADs cost at most ChecksPerNamespace checks per
// build; their answers are remembered (a failing NAD is checked again only
// after its backoff, a passing one once per refresh interval), and another
// namespace's NADs are checked and published meanwhile.
func TestChecksAreBoundedAndRemembered(t *testing.T) {
	var cands []Candidate
	for i := range 100 {
		cands = append(cands, nad(t, "noisy", fmt.Sprintf("broken-%03d", i)))
	}
	cands = append(cands, nad(t, "quiet", "storage"))
	now := time.Unix(1000, 0)
	v := &Verdicts{Now: func() time.Time { return now }, Valid: 30 * time.Second, MaxBackoff: 5 * time.Minute}
	checks := map[string]int{}
	check := func(c Candidate) error {
		checks[c.Namespace]++
		if c.Namespace == "noisy" {
			return errors.New(`macvlan "master": host interface "eth9": Link not found`)
		}
		return nil
	}
	o := InventoryOptions{Multiple: true, MaxDevices: 512, ChecksPerNamespace: 10, Verdicts: v}
	build := func() Inventory { clear(checks); return BuildInventory(cands, check, o) }

	inv := build()
	assert.Equal(t, map[string]int{"noisy": 10, "quiet": 1}, checks, "10 of the noisy namespace's NADs, and the quiet one's")
	assert.Equal(t, map[string]int{"quiet/storage": 1}, publishedNets(inv))
	assert.Len(t, skipsOf(inv, SkipPending), 90)
	assert.Len(t, skipsOf(inv, SkipCannotAttach), 10)
	for range 9 {
		now = now.Add(2 * time.Second) // kick-driven refreshes
		build()
	}
	assert.Equal(t, 101, v.Len(), "every NAD has an answer after 10 builds")
	now = now.Add(2 * time.Second)
	inv = build()
	assert.Equal(t, map[string]int{}, checks, "within their validity nothing is checked again")
	assert.Len(t, skipsOf(inv, SkipCannotAttach), 100)
	assert.Equal(t, map[string]int{"quiet/storage": 1}, publishedNets(inv))

	now = now.Add(30 * time.Second)
	build()
	assert.Equal(t, 1, checks["quiet"], "a passing NAD is checked once per refresh interval")
	assert.LessOrEqual(t, checks["noisy"], 10, "failing ones after their backoff, 10 at most")

	// A NAD removed: its answer goes with it (per entry, not wholesale).
	cands = cands[1:]
	build()
	assert.Equal(t, 100, v.Len())
}
