package nft

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

// span is a half-open interval [lo, hi) of big-endian keys (addresses or
// ports), as an interval set stores it; hi nil runs to the top of the key
// space (no end element).
type span struct {
	lo, hi []byte
}

func prefixSpan(p netip.Prefix) span {
	a := p.Addr().AsSlice()
	last := slices.Clone(a)
	for i := p.Bits(); i < len(a)*8; i++ {
		last[i/8] |= 0x80 >> (i % 8)
	}
	end, _ := netip.AddrFromSlice(last)
	s := span{lo: a}
	if next := end.Next(); next.IsValid() {
		s.hi = next.AsSlice()
	}
	return s
}

func portSpan(r ir.PortRange) span {
	s := span{lo: be16(r.First)}
	if r.Last < 0xffff {
		s.hi = be16(r.Last + 1)
	}
	return s
}

func spanFirst(s span) uint32 { return uint32(binary.BigEndian.Uint16(s.lo)) }

func spanLast(s span) uint32 {
	if s.hi == nil {
		return 0xffff
	}
	return uint32(binary.BigEndian.Uint16(s.hi)) - 1
}

// mergeSpans sorts spans and joins the overlapping and adjacent ones: an
// interval set refuses overlaps, and sorted input keeps the batch stable.
func mergeSpans(in []span) []span {
	slices.SortFunc(in, func(a, b span) int { return bytes.Compare(a.lo, b.lo) })
	out := make([]span, 0, len(in))
	for _, s := range in {
		if n := len(out); n > 0 {
			cur := &out[n-1]
			if cur.hi == nil || bytes.Compare(s.lo, cur.hi) <= 0 {
				if cur.hi != nil && (s.hi == nil || bytes.Compare(s.hi, cur.hi) > 0) {
					cur.hi = s.hi
				}
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// intervalElems are the set elements of spans: a start, then an end
// flagged IntervalEnd (none for an open end).
func intervalElems(spans []span) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, 2*len(spans))
	for _, s := range spans {
		out = append(out, nftables.SetElement{Key: s.lo})
		if s.hi != nil {
			out = append(out, nftables.SetElement{Key: s.hi, IntervalEnd: true})
		}
	}
	return out
}
