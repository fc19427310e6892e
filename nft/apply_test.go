package nft_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/nft"
)

// everyKind is a Ruleset with each kind of rule the contract has.
func everyKind(digest string) ir.Ruleset {
	return ir.Ruleset{Digest: digest, Chains: []ir.Chain{
		chain("net1", ir.Ingress,
			nd,
			ir.Rule{Protocol: ir.ProtoICMP, Verdict: ir.Accept, Comment: "protocol only"},
			ir.Rule{Family: ir.IPv4, Addrs: pfx("10.1.0.5/32", "10.1.0.9/32", "192.168.0.0/23"),
				Protocol: ir.ProtoTCP, Ports: []ir.PortRange{{First: 80, Last: 80}, {First: 6000, Last: 6900}},
				Verdict: ir.Accept, Comment: "ns/p ingress[0]"},
			ir.Rule{Addrs: pfx("10.2.0.0/16", "fd00::/64"), Protocol: ir.ProtoUDP,
				Ports: []ir.PortRange{{First: 53, Last: 53}}, Verdict: ir.Accept, Comment: "both families"},
			ir.Rule{Protocol: ir.ProtoSCTP, Ports: []ir.PortRange{{First: 5000, Last: 5100}},
				Verdict: ir.Accept, Comment: "one range"},
			ir.Rule{Protocol: ir.ProtoICMP, ICMPTypes: []uint8{8}, Verdict: ir.Accept},
		),
		chain("net1", ir.Egress,
			nd,
			ir.Rule{AddrPorts: []ir.AddrPort{
				{Addr: netip.MustParseAddr("10.1.0.5"), Protocol: ir.ProtoTCP, Port: 8080},
				{Addr: netip.MustParseAddr("10.1.0.6"), Protocol: ir.ProtoUDP, Port: 53},
				{Addr: netip.MustParseAddr("fd00::5"), Protocol: ir.ProtoTCP, Port: 8080},
			}, Verdict: ir.Accept, Comment: "named port"},
			// The same addresses as ingress[0]: the set is shared.
			ir.Rule{Family: ir.IPv4, Addrs: pfx("10.1.0.5/32", "10.1.0.9/32", "192.168.0.0/23"),
				Verdict: ir.Accept},
		),
		chain("net2", ir.Ingress),
	}}
}

func TestApplyEveryRuleKindReadsBack(t *testing.T) {
	n := newNS(t)
	p := programmer(t)
	ctx := context.Background()
	assert.Equal(t, "", digest(t, p, n), "no table yet")

	rs := everyKind("d1")
	apply(t, p, n, rs)
	assert.Equal(t, "d1", digest(t, p, n))

	// input: the marker, then one dispatch rule per isolated interface.
	in := rules(t, n, "input")
	require.Len(t, in, 3)
	marker, _ := userdata.GetString(in[0].UserData, userdata.TypeComment)
	assert.Equal(t, "nri-cni v1 d1", marker)
	assert.Empty(t, in[0].Exprs, "the marker matches nothing and decides nothing")
	assert.Equal(t, "i-net1", in[1].Exprs[len(in[1].Exprs)-1].(*expr.Verdict).Chain)
	assert.Equal(t, "i-net2", in[2].Exprs[len(in[2].Exprs)-1].(*expr.Verdict).Chain)
	out := rules(t, n, "output")
	require.Len(t, out, 1, "output: only the dispatch")
	assert.Equal(t, "o-net1", out[0].Exprs[len(out[0].Exprs)-1].(*expr.Verdict).Chain)

	// One nft rule per contract rule, one per family where it has both; a
	// run of accepts on addresses, protocol and ports is one lookup per
	// family (merge.go): ingress[0] and "both families".
	assert.Len(t, rules(t, n, "i-net1"), 8)
	assert.Len(t, rules(t, n, "o-net1"), 7, "replies, ND, named port v4 tcp + udp, v6 tcp, addrs, drop")
	assert.Len(t, rules(t, n, "i-net2"), 2)
	comments := []string{}
	for _, r := range rules(t, n, "i-net1") {
		c, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		comments = append(comments, c)
	}
	assert.Equal(t, []string{"replies", "ND and MLD", "protocol only", "2 rules: ns/p ingress[0]",
		"2 rules: ns/p ingress[0]", "one range", "", "default deny"}, comments)
	last := rules(t, n, "i-net2")[1]
	assert.Equal(t, expr.VerdictDrop, last.Exprs[len(last.Exprs)-1].(*expr.Verdict).Kind)

	// The sets, read back element by element: egress's addresses; the
	// merged run's (address . protocol . port) ranges, one per family.
	sets := setContents(t, n)
	assert.Equal(t, []string{"10.1.0.5", "10.1.0.6 end", "10.1.0.9", "10.1.0.10 end",
		"192.168.0.0", "192.168.2.0 end"}, sets["ipv4_addr"], "egress's addresses")
	assert.Empty(t, sets["inet_service"], "ingress[0]'s ports are in the merged set")
	assert.Len(t, sets["ipv4_addr . inet_proto . inet_service"], 7, "3 blocks × 2 port ranges on TCP, one block on UDP")
	assert.Len(t, sets["ipv6_addr . inet_proto . inet_service"], 1)
	assert.Len(t, sets["icmpv6_type"], 8)
	assert.Len(t, sets["ipv4_addr . inet_service"], 2)
	assert.Len(t, sets["ipv6_addr . inet_service"], 1)
	assert.Empty(t, sets["ipv6_addr"], "fd00::/64 alone: a range compare")
	assert.Equal(t, 1, setCount(t, n, "ipv4_addr"), "one set per distinct content")

	// Replacing changes the marker; Delete removes the table; a second
	// Delete and an empty Ruleset write nothing and succeed.
	apply(t, p, n, everyKind("d2"))
	assert.Equal(t, "d2", digest(t, p, n))
	require.NoError(t, p.Delete(ctx, target(t, n)))
	assert.Equal(t, "", digest(t, p, n))
	require.NoError(t, p.Delete(ctx, target(t, n)))
	apply(t, p, n, ir.Ruleset{})
	apply(t, p, n, everyKind("d3"))
	apply(t, p, n, ir.Ruleset{Digest: "empty"})
	assert.Equal(t, "", digest(t, p, n), "an empty Ruleset deletes the table")
}

func TestApplyRefusesWhatCannotBeProgrammed(t *testing.T) {
	n := newNS(t)
	p := programmer(t)
	for name, rs := range map[string]ir.Ruleset{
		"no digest":      {Chains: []ir.Chain{chain("net1", ir.Ingress)}},
		"bad ifname":     {Digest: "x", Chains: []ir.Chain{chain("net1/../x", ir.Ingress)}},
		"long ifname":    {Digest: "x", Chains: []ir.Chain{chain("abcdefghijklmnop", ir.Ingress)}},
		"twice":          {Digest: "x", Chains: []ir.Chain{chain("net1", ir.Ingress), chain("net1", ir.Ingress)}},
		"ports no proto": {Digest: "x", Chains: []ir.Chain{chain("net1", ir.Ingress, ir.Rule{Ports: []ir.PortRange{{First: 1, Last: 2}}, Verdict: ir.Accept})}},
		"no verdict":     {Digest: "x", Chains: []ir.Chain{chain("net1", ir.Ingress, ir.Rule{Protocol: ir.ProtoTCP})}},
	} {
		t.Run(name, func(t *testing.T) {
			err := p.Apply(context.Background(), target(t, n), rs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), n.Path())
			assert.Equal(t, "", digest(t, p, n), "nothing written")
		})
	}
}

func TestApplyRefusesAnotherNamespaceThanResolved(t *testing.T) {
	a, b := newNS(t), newNS(t)
	p := programmer(t)
	wrong := netns.Netns{Path: a.Path(), ID: target(t, b).ID}
	err := p.Apply(context.Background(), wrong, everyKind("x"))
	require.ErrorIs(t, err, netns.ErrMismatch)
	assert.Equal(t, "", digest(t, p, a))
	assert.Equal(t, "", digest(t, p, b))
}

// setContents reads every set of n's table: type name → elements, each
// as dotted bytes ("10.1.0.5", "0.80 end"), in kernel order sorted.
func setContents(t *testing.T, n ns.NetNS) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	require.NoError(t, n.Do(func(ns.NetNS) error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		sets, err := c.GetSets(&nftables.Table{Family: nftables.TableFamilyINet, Name: nft.TableName})
		if err != nil {
			return err
		}
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			if err != nil {
				return err
			}
			for _, e := range elems {
				out[s.KeyType.Name] = append(out[s.KeyType.Name], elemString(e))
			}
		}
		return nil
	}))
	for k := range out {
		slices.SortFunc(out[k], func(a, b string) int { return compareDotted(a, b) })
	}
	return out
}

func setCount(t *testing.T, n ns.NetNS, typ string) int {
	t.Helper()
	count := 0
	require.NoError(t, n.Do(func(ns.NetNS) error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		sets, err := c.GetSets(&nftables.Table{Family: nftables.TableFamilyINet, Name: nft.TableName})
		for _, s := range sets {
			if s.KeyType.Name == typ {
				count++
			}
		}
		return err
	}))
	return count
}

func elemString(e nftables.SetElement) string {
	var s string
	if a, ok := netip.AddrFromSlice(e.Key); ok && (len(e.Key) == 4 || len(e.Key) == 16) {
		s = a.String()
	} else {
		for i, b := range e.Key {
			if i > 0 {
				s += "."
			}
			s += fmt.Sprint(b)
		}
	}
	if e.IntervalEnd {
		s += " end"
	}
	return s
}

// compareDotted orders "10.1.0.5" before "10.1.0.10 end" numerically.
func compareDotted(a, b string) int {
	var x, y [20]int
	fmt.Sscanf(a, "%d.%d.%d.%d", &x[0], &x[1], &x[2], &x[3])
	fmt.Sscanf(b, "%d.%d.%d.%d", &y[0], &y[1], &y[2], &y[3])
	if c := slices.Compare(x[:], y[:]); c != 0 {
		return c
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A kernel without sets of concatenated ranges (Linux before 5.6) refuses
// the merged batch with EOPNOTSUPP and commits nothing of it: the same
// rules go again unmerged, one nft rule each, on this and every later
// batch of the Programmer.
func TestMergedSetRefusedFallsBackToOneRuleEach(t *testing.T) {
	n := newNS(t)
	calls := 0
	p, err := nft.New(nft.WithFlush(func(c *nftables.Conn) error {
		calls++
		if calls == 1 {
			return fmt.Errorf("netlink receive: %w", unix.EOPNOTSUPP)
		}
		return c.Flush()
	}))
	require.NoError(t, err)
	apply(t, p, n, everyKind("d1"))
	assert.Equal(t, 2, calls, "refused once, then unmerged")
	assert.Equal(t, "d1", digest(t, p, n))
	assert.Len(t, rules(t, n, "i-net1"), 9, "one nft rule per contract rule and family")
	assert.Empty(t, setContents(t, n)["ipv4_addr . inet_proto . inet_service"])

	apply(t, p, n, everyKind("d2"))
	assert.Equal(t, 3, calls, "later batches are unmerged at once")
	assert.Len(t, rules(t, n, "i-net1"), 9)

	// Any other error is the caller's, and does not switch merging off.
	calls = 0
	q, err := nft.New(nft.WithFlush(func(*nftables.Conn) error { calls++; return unix.EPERM }))
	require.NoError(t, err)
	require.ErrorIs(t, q.Apply(context.Background(), target(t, n), everyKind("d3")), unix.EPERM)
	assert.Equal(t, 1, calls)
}
