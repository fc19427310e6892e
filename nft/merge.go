package nft

// Merging a chain's accept rules into one lookup. A pod selected by many
// policies gets many rules of one shape — "from these addresses, on this
// protocol, to these ports, accept" — and every rule and every set is a
// netlink message the kernel acknowledges (and, for a rule, echoes back).
// A run of consecutive accept rules of that shape is, by what a chain
// means, their union: the order inside a run of accepts decides nothing.
// The run becomes one rule per address family that looks the packet's
// (peer address . protocol . port) up in one set of ranges (an nftables
// concatenation with intervals, Linux 5.6): two messages for the run,
// whatever its length. The ranges are made disjoint first (the kernel
// refuses overlapping elements), by a sweep over the address boundaries.

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

// mergeable says whether r belongs in a merged run: an accept on peer
// addresses, a port protocol and ports, nothing else.
func mergeable(r ir.Rule) bool {
	return r.Verdict == ir.Accept && !r.Established && r.AddrPorts == nil && len(r.Addrs) > 0 &&
		(r.Protocol == ir.ProtoTCP || r.Protocol == ir.ProtoUDP || r.Protocol == ir.ProtoSCTP) &&
		len(r.Ports) > 0 && len(r.ICMPTypes) == 0
}

// addRules emits a chain's rules in order, each run of two or more
// mergeable rules as one lookup per family.
func (p *program) addRules(chain string, d ir.Direction, rules []ir.Rule) error {
	var run []ir.Rule
	flush := func() error {
		defer func() { run = run[:0] }()
		if len(run) == 1 {
			return p.addRule(chain, d, run[0])
		}
		if len(run) > 1 {
			p.addMerged(chain, d, run)
			p.merged = true
		}
		return nil
	}
	for i, r := range rules {
		if p.merge && mergeable(r) {
			run = append(run, r)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if err := p.addRule(chain, d, r); err != nil {
			return fmt.Errorf("rule %d (%s): %w", i, r.Comment, err)
		}
	}
	return flush()
}

// addrRange is an inclusive address range of one family.
type addrRange struct{ first, last netip.Addr }

// box is an address range with the merged port ranges allowed from it.
type box struct {
	addrRange
	ports []ir.PortRange
}

// addMerged emits run (mergeable rules, all accept) as one rule per family.
func (p *program) addMerged(chain string, d ir.Direction, run []ir.Rule) {
	for _, fam := range []ir.Family{ir.IPv4, ir.IPv6} {
		byProto := map[ir.Protocol][]tuple{}
		for _, r := range run {
			if r.Family != ir.FamilyAny && r.Family != fam {
				continue
			}
			for _, pr := range r.Addrs {
				if !isFamily(pr.Addr(), fam) {
					continue
				}
				ar := prefixRange(pr)
				for _, pt := range r.Ports {
					if pt.Last < pt.First {
						continue // as addRule: an empty range matches nothing
					}
					byProto[r.Protocol] = append(byProto[r.Protocol], tuple{ar, pt})
				}
			}
		}
		if len(byProto) == 0 {
			continue
		}
		var elems []nftables.SetElement
		protos := make([]ir.Protocol, 0, len(byProto))
		for proto := range byProto {
			protos = append(protos, proto)
		}
		slices.Sort(protos)
		var keys [][]byte
		for _, proto := range protos {
			for _, b := range sweep(byProto[proto]) {
				for _, pt := range b.ports {
					lo := concatKey(b.first, proto, pt.First)
					hi := concatKey(b.last, proto, pt.Last)
					elems = append(elems, nftables.SetElement{Key: lo, KeyEnd: hi})
					keys = append(keys, lo, hi)
				}
			}
		}
		s := p.set(contentKey("addrprotoport", byte(fam), keys...), func() *set {
			addr := nftables.TypeIPAddr
			if fam == ir.IPv6 {
				addr = nftables.TypeIP6Addr
			}
			return &set{set: &nftables.Set{
				KeyType:  nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService),
				Interval: true, Concatenation: true}, elems: elems}
		})
		protoReg, portReg := uint32(reg32A+1), uint32(reg32A+2)
		if fam == ir.IPv6 {
			protoReg, portReg = reg32A+4, reg32A+5
		}
		exprs := slices.Concat(nfproto(fam), []expr.Any{
			addrLoad(fam, d, reg32A),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
			dport(portReg),
			&expr.Lookup{SourceRegister: reg32A, SetName: s.set.Name, SetID: s.set.ID},
			&expr.Verdict{Kind: expr.VerdictAccept},
		})
		p.rules = append(p.rules, rule{chain: chain, exprs: exprs,
			userdata: comment(fmt.Sprintf("%d rules: %s", len(run), run[0].Comment))})
	}
}

// tuple is one (address range, port range) a rule allows.
type tuple struct {
	addr addrRange
	port ir.PortRange
}

// prefixRange is p's first and last address (unmapped).
func prefixRange(p netip.Prefix) addrRange {
	p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked()
	s := prefixSpan(p)
	return addrRange{first: p.Addr(), last: lastOf(s)}
}

func lastOf(s span) netip.Addr {
	a, _ := netip.AddrFromSlice(spanLastKey(s))
	return a
}

// sweep makes tuples disjoint: the address line cut at every tuple's start
// and end, each piece with the union of its covering tuples' ports, and
// adjacent pieces with the same ports joined again.
func sweep(ts []tuple) []box {
	type event struct {
		at    netip.Addr
		port  ir.PortRange
		delta int
	}
	evs := make([]event, 0, 2*len(ts))
	for _, t := range ts {
		evs = append(evs, event{t.addr.first, t.port, +1})
		if next := t.addr.last.Next(); next.IsValid() {
			evs = append(evs, event{next, t.port, -1})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	active := map[ir.PortRange]int{}
	var out []box
	for i := 0; i < len(evs); {
		at := evs[i].at
		for ; i < len(evs) && evs[i].at == at; i++ {
			active[evs[i].port] += evs[i].delta
			if active[evs[i].port] == 0 {
				delete(active, evs[i].port)
			}
		}
		if len(active) == 0 {
			continue
		}
		last := maxAddr(at)
		if i < len(evs) {
			last = evs[i].at.Prev()
		}
		ports := mergePorts(active)
		if n := len(out); n > 0 && out[n-1].last.Next() == at && slices.Equal(out[n-1].ports, ports) {
			out[n-1].last = last
			continue
		}
		out = append(out, box{addrRange{at, last}, ports})
	}
	return out
}

// mergePorts is the union of the active port ranges, sorted and joined.
func mergePorts(active map[ir.PortRange]int) []ir.PortRange {
	rs := make([]ir.PortRange, 0, len(active))
	for r := range active {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b ir.PortRange) int { return int(a.First) - int(b.First) })
	out := rs[:0:0]
	for _, r := range rs {
		if n := len(out); n > 0 && uint32(r.First) <= uint32(out[n-1].Last)+1 {
			out[n-1].Last = max(out[n-1].Last, r.Last)
			continue
		}
		out = append(out, r)
	}
	return out
}

func maxAddr(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom4([4]byte{255, 255, 255, 255})
	}
	var b [16]byte
	for i := range b {
		b[i] = 0xff
	}
	return netip.AddrFrom16(b)
}

// concatKey is address . protocol . port, each padded to 4 bytes.
func concatKey(a netip.Addr, proto ir.Protocol, port uint16) []byte {
	return slices.Concat(a.AsSlice(), []byte{byte(proto), 0, 0, 0}, be16(port), []byte{0, 0})
}
