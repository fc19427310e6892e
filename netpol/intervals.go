package netpol

import (
	"net/netip"
	"slices"
)

// span is an inclusive range of addresses of one family. ipBlocks and pod
// addresses become spans, excepts are subtracted and the union is taken as
// spans, then turned back into the fewest prefixes: nftables' interval sets
// refuse overlapping elements, and a sorted, merged set keeps the digest
// stable.
type span struct{ lo, hi netip.Addr }

func prefixSpan(p netip.Prefix) span {
	p = p.Masked()
	return span{lo: p.Addr(), hi: lastAddr(p)}
}

// lastAddr is the highest address of p (all host bits set).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// mergeSpans sorts and merges overlapping or adjacent spans (one family).
func mergeSpans(ss []span) []span {
	if len(ss) == 0 {
		return nil
	}
	slices.SortFunc(ss, func(a, b span) int { return a.lo.Compare(b.lo) })
	out := ss[:1]
	for _, s := range ss[1:] {
		last := &out[len(out)-1]
		if next := last.hi.Next(); s.lo.Compare(last.hi) <= 0 || (next.IsValid() && s.lo == next) {
			if s.hi.Compare(last.hi) > 0 {
				last.hi = s.hi
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// subtract removes every span of ex (merged, sorted) from s.
func subtract(s span, ex []span) []span {
	var out []span
	cur := s
	for _, e := range ex {
		if e.hi.Compare(cur.lo) < 0 || e.lo.Compare(cur.hi) > 0 {
			continue
		}
		if e.lo.Compare(cur.lo) > 0 {
			out = append(out, span{cur.lo, e.lo.Prev()})
		}
		if e.hi.Compare(cur.hi) >= 0 {
			return out
		}
		cur.lo = e.hi.Next()
	}
	return append(out, cur)
}

// spanPrefixes covers merged spans with the fewest prefixes, in order.
func spanPrefixes(ss []span) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		lo := s.lo
		for {
			bits := lo.BitLen()
			// The shortest prefix starting at lo that stays inside s.
			for bits > 0 {
				p := netip.PrefixFrom(lo, bits-1)
				if p.Masked().Addr() != lo || lastAddr(p).Compare(s.hi) > 0 {
					break
				}
				bits--
			}
			p := netip.PrefixFrom(lo, bits)
			out = append(out, p)
			end := lastAddr(p)
			if end.Compare(s.hi) >= 0 {
				break
			}
			lo = end.Next()
		}
	}
	return out
}

// addrSet collects spans per family (index 0 IPv4, 1 IPv6).
type addrSet [2][]span

func familyIndex(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

func (s *addrSet) addAddr(a netip.Addr) {
	a = a.Unmap()
	s[familyIndex(a)] = append(s[familyIndex(a)], span{a, a})
}

func (s *addrSet) addSpans(fam int, ss []span) { s[fam] = append(s[fam], ss...) }

// prefixes merges each family and returns its prefixes.
func (s *addrSet) prefixes() [2][]netip.Prefix {
	return [2][]netip.Prefix{spanPrefixes(mergeSpans(s[0])), spanPrefixes(mergeSpans(s[1]))}
}
