package nft

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

// sweep's boxes allow exactly what the tuples allow (every boundary and a
// random sample of points, for random overlapping tuples), and they are
// disjoint, sorted and joined: the kernel refuses overlapping elements.
func TestSweepIsTheUnionDisjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addr := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{10, 0, byte(v >> 8), byte(v)})
	}
	for round := range 300 {
		var ts []tuple
		for range 1 + rng.IntN(12) {
			a, b := rng.Uint32N(600), rng.Uint32N(600)
			p, q := uint16(rng.IntN(40)), uint16(rng.IntN(40))
			ts = append(ts, tuple{addrRange{addr(min(a, b)), addr(max(a, b))}, ir.PortRange{First: min(p, q), Last: max(p, q)}})
		}
		boxes := sweep(ts)
		for i, b := range boxes {
			require.LessOrEqual(t, b.first.Compare(b.last), 0, "round %d box %d", round, i)
			if i > 0 {
				require.Less(t, boxes[i-1].last.Compare(b.first), 0, "round %d: boxes overlap or are unsorted", round)
			}
			for j := 1; j < len(b.ports); j++ {
				require.Less(t, uint32(b.ports[j-1].Last)+1, uint32(b.ports[j].First), "round %d: ports not joined", round)
			}
		}
		in := func(a netip.Addr, port uint16) (want, got bool) {
			for _, tp := range ts {
				if a.Compare(tp.addr.first) >= 0 && a.Compare(tp.addr.last) <= 0 && port >= tp.port.First && port <= tp.port.Last {
					want = true
				}
			}
			for _, b := range boxes {
				if a.Compare(b.first) >= 0 && a.Compare(b.last) <= 0 {
					for _, pr := range b.ports {
						got = got || port >= pr.First && port <= pr.Last
					}
				}
			}
			return want, got
		}
		for v := uint32(0); v < 610; v++ {
			for _, port := range []uint16{0, 1, uint16(rng.IntN(41)), 39, 40} {
				want, got := in(addr(v), port)
				require.Equal(t, want, got, "round %d: %s port %d", round, addr(v), port)
			}
		}
	}
}

// The top of the address space has no next address: a range that ends
// there ends the sweep.
func TestSweepToTheTop(t *testing.T) {
	all := prefixRange(netip.MustParsePrefix("0.0.0.0/0"))
	boxes := sweep([]tuple{{all, ir.PortRange{First: 53, Last: 53}},
		{prefixRange(netip.MustParsePrefix("255.255.255.0/24")), ir.PortRange{First: 80, Last: 80}}})
	require.Equal(t, []box{
		{addrRange{netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.254.255")}, []ir.PortRange{{First: 53, Last: 53}}},
		{addrRange{netip.MustParseAddr("255.255.255.0"), netip.MustParseAddr("255.255.255.255")}, []ir.PortRange{{First: 53, Last: 53}, {First: 80, Last: 80}}},
	}, boxes)
}
