package nft

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

func TestChunksStayUnder60KiBAndKeepIntervalsWhole(t *testing.T) {
	var spans []span
	a := netip.MustParseAddr("fd00::")
	for i := 0; i < 16384; i++ {
		spans = append(spans, prefixSpan(netip.PrefixFrom(a, 128)))
		a = a.Next().Next()
	}
	elems := intervalElems(spans)
	got := chunks(elems)
	require.Greater(t, len(got), 1)
	total := 0
	for _, c := range got {
		size := 0
		for _, e := range c {
			size += elemSize(e)
		}
		assert.LessOrEqual(t, size, chunkBytes)
		assert.False(t, c[0].IntervalEnd, "a chunk never starts with an interval's end")
		total += len(c)
	}
	assert.Equal(t, len(elems), total)
	assert.Len(t, chunks(elems[:10]), 1)
	assert.Empty(t, chunks(nil))
}

func TestMergeSpans(t *testing.T) {
	str := func(ss []span) (out []string) {
		for _, e := range intervalElems(ss) {
			a, _ := netip.AddrFromSlice(e.Key)
			s := a.String()
			if e.IntervalEnd {
				s += " end"
			}
			out = append(out, s)
		}
		return out
	}
	p := func(s string) span { return prefixSpan(netip.MustParsePrefix(s)) }
	assert.Equal(t, []string{"10.0.0.0", "10.0.0.2 end"}, str(mergeSpans([]span{p("10.0.0.1/32"), p("10.0.0.0/32")})), "adjacent")
	assert.Equal(t, []string{"10.0.0.0", "10.0.1.0 end"}, str(mergeSpans([]span{p("10.0.0.0/24"), p("10.0.0.7/32")})), "contained")
	assert.Equal(t, []string{"0.0.0.0"}, str(mergeSpans([]span{p("0.0.0.0/0"), p("10.0.0.7/32")})), "open end")
	assert.Equal(t, []string{"255.255.255.255"}, str([]span{p("255.255.255.255/32")}))
	ports := mergeSpans([]span{portSpan(ir.PortRange{First: 1000, Last: 65535}), portSpan(ir.PortRange{First: 80, Last: 80})})
	require.Len(t, ports, 2)
	assert.Nil(t, ports[1].hi, "up to 65535: no end element")
	assert.Equal(t, uint32(80), spanFirst(ports[0]))
	assert.Equal(t, uint32(80), spanLast(ports[0]))
}

// One address or one block is compared in the rule: no set (a set is two
// more netlink messages, each acknowledged).
func TestBuildComparesOneRangeWithoutASet(t *testing.T) {
	for _, c := range []struct {
		addrs []string
		want  string
	}{
		{[]string{"10.0.0.7/32"}, "*expr.Cmp"},
		{[]string{"10.0.0.0/24"}, "*expr.Range"},
		{[]string{"10.0.0.0/25", "10.0.0.128/25"}, "*expr.Range"}, // adjacent: merged
		{[]string{"fd00::/64"}, "*expr.Range"},
		{[]string{"10.0.0.0/24", "10.0.2.0/24"}, "*expr.Lookup"},
	} {
		var pfx []netip.Prefix
		for _, a := range c.addrs {
			pfx = append(pfx, netip.MustParsePrefix(a))
		}
		rs := ir.Ruleset{Digest: "d", Chains: []ir.Chain{{IfName: "net1", Direction: ir.Ingress,
			Rules: []ir.Rule{{Addrs: pfx, Verdict: ir.Accept}}}}}
		prog, err := build(&nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}, rs, true)
		require.NoError(t, err)
		last := prog.rules[len(prog.rules)-1].exprs
		assert.Equal(t, c.want, fmt.Sprintf("%T", last[len(last)-2]), "%v", c.addrs)
		if c.want != "*expr.Lookup" {
			assert.Empty(t, prog.sets, "%v", c.addrs)
		}
	}
}

func TestBuildSharesSetsAndNeverUsesTheGlobalSetID(t *testing.T) {
	r := ir.Rule{Family: ir.IPv4, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.9.0/24")},
		Verdict: ir.Accept}
	rs := ir.Ruleset{Digest: "d", Chains: []ir.Chain{
		{IfName: "net1", Direction: ir.Ingress, Rules: []ir.Rule{r}},
		{IfName: "net2", Direction: ir.Ingress, Rules: []ir.Rule{r, {Verdict: ir.Drop}}},
	}}
	prog, err := build(&nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}, rs, true)
	require.NoError(t, err)
	require.Len(t, prog.sets, 1)
	assert.Equal(t, uint32(1), prog.sets[0].set.ID)
	var lookups int
	for _, rl := range prog.rules {
		for _, e := range rl.exprs {
			if l, ok := e.(*expr.Lookup); ok {
				lookups++
				assert.Equal(t, prog.sets[0].set.Name, l.SetName)
			}
		}
	}
	assert.Equal(t, 2, lookups)
	// A rule whose peers resolved to no address is not emitted.
	rs.Chains[0].Rules[0].Addrs = []netip.Prefix{}
	prog, err = build(&nftables.Table{Name: TableName}, rs, true)
	require.NoError(t, err)
	assert.Len(t, prog.rules, 1+2+1+1, "marker, two dispatches, net2's two rules, none for net1's")
}

// BenchmarkBuild is Apply's user-space part at the address cap: the
// translation and the batch's encoding, no kernel.
func BenchmarkBuild(b *testing.B) {
	var prefixes []netip.Prefix
	a := netip.MustParseAddr("10.128.0.0")
	for i := 0; i < 16384; i++ {
		prefixes = append(prefixes, netip.PrefixFrom(a, 32))
		a = a.Next().Next()
	}
	rs := ir.Ruleset{Digest: "b", Chains: []ir.Chain{{IfName: "net1", Direction: ir.Ingress, Rules: []ir.Rule{
		{Family: ir.IPv4, Addrs: prefixes, Protocol: ir.ProtoTCP, Ports: []ir.PortRange{{First: 80, Last: 80}}, Verdict: ir.Accept},
		{Verdict: ir.Drop}}}}}
	for b.Loop() {
		prog, err := build(&nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}, rs, true)
		if err != nil {
			b.Fatal(err)
		}
		c, _ := nftables.New(nftables.WithTestDial(nil))
		if err := prog.write(c, nil); err != nil {
			b.Fatal(err)
		}
	}
}
