package nft_test

// Bench row 12a (design §4.12): the same Ruleset into a test netns, through
// this package (netlink, in-process) and through sigs.k8s.io/knftables
// (one `nft -f -` per Apply, as its Run does). Each iteration replaces the
// table (add, delete, add, contents) as an update does. p50 and p99 are
// reported as metrics next to ns/op.
//
//	go test -run xxx -bench Apply -benchtime 200x ./nft/   (root; knftables needs nft)

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

// benchRuleset: net1 isolated for ingress, one rule allowing TCP 80 from
// n addresses (every other one: n set intervals), replies, drop.
func benchRuleset(n int) (ir.Ruleset, []string) {
	var prefixes []netip.Prefix
	var texts []string
	a := netip.MustParseAddr("10.128.0.0")
	for i := 0; i < n; i++ {
		prefixes = append(prefixes, netip.PrefixFrom(a, 32))
		texts = append(texts, a.String())
		a = a.Next().Next()
	}
	return ir.Ruleset{Digest: fmt.Sprint("bench", n), Chains: []ir.Chain{chain("net1", ir.Ingress,
		ir.Rule{Family: ir.IPv4, Addrs: prefixes, Protocol: ir.ProtoTCP,
			Ports: []ir.PortRange{{First: 80, Last: 80}}, Verdict: ir.Accept})}}, texts
}

func BenchmarkApply(b *testing.B) {
	for _, n := range []int{10, 1000, 16384} {
		rs, addrs := benchRuleset(n)
		b.Run(fmt.Sprintf("google-nftables/%d", n), func(b *testing.B) {
			pod := newNS(b)
			p := programmer(b)
			target := target(b, pod)
			ctx := context.Background()
			timed(b, func() error { return p.Apply(ctx, target, rs) })
		})
		b.Run(fmt.Sprintf("knftables/%d", n), func(b *testing.B) {
			requireRoot(b)
			if _, err := exec.LookPath("nft"); err != nil {
				b.Skip("knftables arm skipped: no nft binary (bench-only tool: test/tools/install.sh nft installs Debian's nftables)")
			}
			pod := newNS(b)
			var k knftables.Interface
			require.NoError(b, pod.Do(func(ns.NetNS) (err error) {
				k, err = knftables.New(knftables.InetFamily, "nri-cni")
				return err
			}))
			ctx := context.Background()
			timed(b, func() error {
				return pod.Do(func(ns.NetNS) error { return k.Run(ctx, knftablesTx(k, addrs)) })
			})
		})
	}
}

// knftablesTx is benchRuleset's table as a knftables transaction.
func knftablesTx(k knftables.Interface, addrs []string) *knftables.Transaction {
	tx := k.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "input", Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.InputHook), Priority: knftables.PtrTo(knftables.FilterPriority),
		Policy: knftables.PtrTo(knftables.AcceptPolicy)})
	tx.Add(&knftables.Chain{Name: "output", Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.OutputHook), Priority: knftables.PtrTo(knftables.FilterPriority),
		Policy: knftables.PtrTo(knftables.AcceptPolicy)})
	tx.Add(&knftables.Chain{Name: "i-net1"})
	tx.Add(&knftables.Set{Name: "s0", Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	for _, a := range addrs {
		tx.Add(&knftables.Element{Set: "s0", Key: []string{a}})
	}
	tx.Add(&knftables.Rule{Chain: "input", Rule: `iifname "net1" jump i-net1`})
	tx.Add(&knftables.Rule{Chain: "i-net1", Rule: "ct state established,related accept"})
	tx.Add(&knftables.Rule{Chain: "i-net1", Rule: "meta nfproto ipv4 ip saddr @s0 meta l4proto tcp th dport 80 accept"})
	tx.Add(&knftables.Rule{Chain: "i-net1", Rule: "drop"})
	return tx
}

// timed runs f b.N times and reports p50 and p99 in milliseconds.
func timed(b *testing.B, f func() error) {
	b.Helper()
	require.NoError(b, f()) // warm: the table exists, as for an update
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	b.ReportMetric(ms(d[len(d)/2]), "p50-ms")
	b.ReportMetric(ms(d[(len(d)*99)/100]), "p99-ms")
}
