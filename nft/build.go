package nft

// The translation of a ir.Ruleset into nftables objects: pure, no
// netlink. program() is what Apply writes in one batch; tests read it
// without a kernel.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

const (
	// TableName is the table nri-cni owns in a pod's netns (family inet).
	TableName = "nri-cni"
	// markerPrefix starts the userdata comment of input's first rule; the
	// Ruleset's digest follows.
	markerPrefix = "nri-cni v1 "
	// chunkBytes bounds the encoded elements of one NEWSETELEM message: the
	// nested attribute's length is a uint16, and google/nftables v0.3.0
	// sends all elements of one SetAddElements in one message.
	chunkBytes = 60 << 10
	// maxComment is what nft itself keeps of a rule comment.
	maxComment = 128
)

// ct state bits (NF_CT_STATE_BIT of IP_CT_ESTABLISHED = 1, IP_CT_RELATED = 2).
const ctEstablishedRelated = 1<<1 | 1<<2

// Registers: reg 1 (16 bytes) for single matches; 32-bit registers 8… for
// the address . port concatenation.
const (
	reg1   = 1
	reg32A = 8
)

// set is one named set of the table with its elements.
type set struct {
	set   *nftables.Set
	elems []nftables.SetElement
}

// rule is one nft rule of a chain (before the table is attached).
type rule struct {
	chain    string
	exprs    []expr.Any
	userdata []byte
}

// program is everything the batch adds after the table.
type program struct {
	chains []*nftables.Chain // input, output, then the per-interface chains
	sets   []*set
	rules  []rule
	byKey  map[[sha256.Size]byte]*set
	table  *nftables.Table
	// merge: runs of accepts become one lookup (merge.go); merged: one did.
	merge, merged bool
}

// chainName is the per-interface chain of (ifname, direction).
func chainName(ifname string, d ir.Direction) string {
	if d == ir.Egress {
		return "o-" + ifname
	}
	return "i-" + ifname
}

// validIfName is what the kernel accepts as an interface name.
func validIfName(n string) bool {
	if n == "" || len(n) >= unix.IFNAMSIZ || n == "." || n == ".." {
		return false
	}
	return !strings.ContainsAny(n, "/: \t\n\x00")
}

// build translates rs into the objects of table t. An error names the chain
// and rule that cannot be programmed (a renderer bug, never tenant input).
func build(t *nftables.Table, rs ir.Ruleset, merge bool) (*program, error) {
	if rs.Digest == "" {
		return nil, fmt.Errorf("ruleset has no digest")
	}
	p := &program{table: t, byKey: map[[sha256.Size]byte]*set{}, merge: merge}
	accept := nftables.ChainPolicyAccept
	p.chains = append(p.chains,
		&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput,
			Priority: nftables.ChainPriorityFilter, Policy: &accept},
		&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput,
			Priority: nftables.ChainPriorityFilter, Policy: &accept})
	// The marker: a rule that matches nothing and decides nothing.
	p.rules = append(p.rules, rule{chain: "input",
		userdata: userdata.AppendString(nil, userdata.TypeComment, markerPrefix+rs.Digest)})
	seen := map[string]bool{}
	for _, c := range rs.Chains {
		if !validIfName(c.IfName) {
			return nil, fmt.Errorf("chain %q: invalid interface name", c.IfName)
		}
		if c.Direction != ir.Ingress && c.Direction != ir.Egress {
			return nil, fmt.Errorf("chain %q: invalid direction %d", c.IfName, c.Direction)
		}
		name := chainName(c.IfName, c.Direction)
		if seen[name] {
			return nil, fmt.Errorf("chain %q %s: listed twice", c.IfName, c.Direction)
		}
		seen[name] = true
		p.chains = append(p.chains, &nftables.Chain{Name: name, Table: t})
		meta, base := expr.MetaKeyIIFNAME, "input"
		if c.Direction == ir.Egress {
			meta, base = expr.MetaKeyOIFNAME, "output"
		}
		p.rules = append(p.rules, rule{chain: base, exprs: []expr.Any{
			&expr.Meta{Key: meta, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifname(c.IfName)},
			&expr.Verdict{Kind: expr.VerdictJump, Chain: name},
		}})
		if err := p.addRules(name, c.Direction, c.Rules); err != nil {
			return nil, fmt.Errorf("chain %q %s %w", c.IfName, c.Direction, err)
		}
	}
	return p, nil
}

// ifname is an interface name as meta iifname loads it: IFNAMSIZ, NUL padded.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// addRule emits one ir.Rule: one nft rule, or one per address family
// (and per protocol for AddrPorts) where a single rule cannot say it.
func (p *program) addRule(chain string, d ir.Direction, r ir.Rule) error {
	var verdict expr.VerdictKind
	switch r.Verdict {
	case ir.Accept:
		verdict = expr.VerdictAccept
	case ir.Drop:
		verdict = expr.VerdictDrop
	default:
		return fmt.Errorf("invalid verdict %d", r.Verdict)
	}
	if len(r.Ports) > 0 && r.Protocol != ir.ProtoTCP && r.Protocol != ir.ProtoUDP && r.Protocol != ir.ProtoSCTP {
		return fmt.Errorf("ports need protocol TCP, UDP or SCTP, not %d", r.Protocol)
	}
	if len(r.ICMPTypes) > 0 && r.Protocol != ir.ProtoICMP && r.Protocol != ir.ProtoICMPv6 {
		return fmt.Errorf("ICMP types need protocol ICMP or ICMPv6, not %d", r.Protocol)
	}
	if r.AddrPorts != nil && (r.Addrs != nil || r.Protocol != 0 || r.Ports != nil || r.ICMPTypes != nil) {
		return fmt.Errorf("AddrPorts is used alone")
	}
	if r.Addrs != nil && len(r.Addrs) == 0 || r.AddrPorts != nil && len(r.AddrPorts) == 0 {
		return nil // matches nothing: emitting nothing is the same
	}
	ud := comment(r.Comment)
	emit := func(exprs []expr.Any) {
		exprs = append(exprs, &expr.Verdict{Kind: verdict})
		p.rules = append(p.rules, rule{chain: chain, exprs: exprs, userdata: ud})
	}
	for _, fam := range families(r) {
		var ex []expr.Any
		if r.Established {
			ex = append(ex,
				&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(ctEstablishedRelated), Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)})
		}
		if fam != ir.FamilyAny {
			ex = append(ex, nfproto(fam)...)
		}
		if r.AddrPorts != nil {
			for _, proto := range addrPortProtos(r.AddrPorts, fam) {
				s := p.addrPortSet(fam, proto, r.AddrPorts)
				emit(slices.Concat(ex, l4proto(proto), addrPortMatch(fam, d, s)))
			}
			continue
		}
		if r.Addrs != nil {
			ex = append(ex, p.addrMatch(fam, d, r.Addrs)...)
		}
		if r.Protocol != ir.ProtoAny {
			ex = append(ex, l4proto(r.Protocol)...)
		}
		if len(r.Ports) > 0 {
			ex = append(ex, p.portMatch(r.Ports)...)
		}
		if len(r.ICMPTypes) > 0 {
			ex = append(ex, p.icmpMatch(r.Protocol, r.ICMPTypes)...)
		}
		emit(ex)
	}
	return nil
}

// comment is a rule's userdata: c, cut to what nft keeps; nil for "".
func comment(c string) []byte {
	if c == "" {
		return nil
	}
	if len(c) > maxComment {
		c = c[:maxComment]
	}
	return userdata.AppendString(nil, userdata.TypeComment, c)
}

// families says which address families a rule is emitted for: its own, or
// each family its addresses have when it names none.
func families(r ir.Rule) []ir.Family {
	if r.Family != ir.FamilyAny {
		return []ir.Family{r.Family}
	}
	var v4, v6 bool
	for _, a := range r.Addrs {
		v4, v6 = v4 || a.Addr().Is4(), v6 || !a.Addr().Is4()
	}
	for _, a := range r.AddrPorts {
		v4, v6 = v4 || a.Addr.Is4(), v6 || !a.Addr.Is4()
	}
	var out []ir.Family
	if v4 {
		out = append(out, ir.IPv4)
	}
	if v6 {
		out = append(out, ir.IPv6)
	}
	if out == nil {
		out = []ir.Family{ir.FamilyAny}
	}
	return out
}

func isFamily(a netip.Addr, f ir.Family) bool {
	return f == ir.FamilyAny || (f == ir.IPv4) == a.Unmap().Is4()
}

func nfproto(f ir.Family) []expr.Any {
	v := byte(unix.NFPROTO_IPV4)
	if f == ir.IPv6 {
		v = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{v}},
	}
}

func l4proto(p ir.Protocol) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(p)}},
	}
}

// addrLoad loads the peer's address: the source on ingress, the
// destination on egress.
func addrLoad(f ir.Family, d ir.Direction, reg uint32) *expr.Payload {
	off, n := uint32(12), uint32(4) // IPv4 saddr
	if f == ir.IPv6 {
		off, n = 8, 16
	}
	if d == ir.Egress {
		off += n
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

// dport loads the transport header's destination port (th dport).
func dport(reg uint32) *expr.Payload {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

// contentKey identifies a set's content: its kind, a qualifier (family,
// protocol) and its keys, each length-prefixed.
func contentKey(kind string, q byte, keys ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0, q})
	for _, k := range keys {
		h.Write([]byte{byte(len(k))})
		h.Write(k)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// spanKeys are a span list's bounds in order (an open end as empty).
func spanKeys(spans []span) [][]byte {
	out := make([][]byte, 0, 2*len(spans))
	for _, s := range spans {
		out = append(out, s.lo, s.hi)
	}
	return out
}

// set returns the set with this content key, adding it on first use.
func (p *program) set(k [sha256.Size]byte, mk func() *set) *set {
	if s, ok := p.byKey[k]; ok {
		return s
	}
	s := mk()
	s.set.Table = p.table
	s.set.ID = uint32(len(p.sets) + 1) // set per batch: never google/nftables' global counter
	s.set.Name = fmt.Sprintf("s%d", len(p.sets))
	p.sets = append(p.sets, s)
	p.byKey[k] = s
	return s
}

// addrMatch matches the peer address of direction d against one family's
// addresses of a rule: one range is compared in the rule itself (no set:
// a set costs two more netlink messages, each acknowledged, and most
// rules' peers are one address or one block), more go through an interval
// set.
func (p *program) addrMatch(f ir.Family, d ir.Direction, prefixes []netip.Prefix) []expr.Any {
	ranges := addrSpans(f, prefixes)
	if len(ranges) == 1 {
		lo, last := ranges[0].lo, spanLastKey(ranges[0])
		if bytes.Equal(lo, last) {
			return []expr.Any{addrLoad(f, d, reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: lo}}
		}
		return []expr.Any{addrLoad(f, d, reg1), &expr.Range{Op: expr.CmpOpEq, Register: reg1, FromData: lo, ToData: last}}
	}
	s := p.addrSet(f, ranges)
	return []expr.Any{addrLoad(f, d, reg1), &expr.Lookup{SourceRegister: reg1, SetName: s.set.Name, SetID: s.set.ID}}
}

// addrSpans are one family's prefixes as merged spans.
func addrSpans(f ir.Family, prefixes []netip.Prefix) []span {
	ranges := make([]span, 0, len(prefixes))
	for _, pr := range prefixes {
		if isFamily(pr.Addr(), f) {
			pr = netip.PrefixFrom(pr.Addr().Unmap(), pr.Bits()).Masked()
			ranges = append(ranges, prefixSpan(pr))
		}
	}
	return mergeSpans(ranges)
}

// spanLastKey is the last key inside s (all ones for an open end).
func spanLastKey(s span) []byte {
	if s.hi == nil {
		return bytes.Repeat([]byte{0xff}, len(s.lo))
	}
	a, _ := netip.AddrFromSlice(s.hi)
	return a.Prev().AsSlice()
}

// addrSet is the interval set of one family's merged address spans.
func (p *program) addrSet(f ir.Family, ranges []span) *set {
	return p.set(contentKey("addr", byte(f), spanKeys(ranges)...), func() *set {
		kt := nftables.TypeIPAddr
		if f == ir.IPv6 {
			kt = nftables.TypeIP6Addr
		}
		return &set{set: &nftables.Set{KeyType: kt, Interval: true}, elems: intervalElems(ranges)}
	})
}

func (p *program) portMatch(ports []ir.PortRange) []expr.Any {
	var ranges []span
	for _, r := range ports {
		if r.Last < r.First {
			continue
		}
		ranges = append(ranges, portSpan(r))
	}
	ranges = mergeSpans(ranges)
	if len(ranges) == 1 {
		r := ir.PortRange{First: uint16(spanFirst(ranges[0])), Last: uint16(spanLast(ranges[0]))}
		if r.First == r.Last {
			return []expr.Any{dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(r.First)}}
		}
		return []expr.Any{dport(reg1),
			&expr.Range{Op: expr.CmpOpEq, Register: reg1, FromData: be16(r.First), ToData: be16(r.Last)}}
	}
	s := p.set(contentKey("ports", 0, spanKeys(ranges)...), func() *set {
		return &set{set: &nftables.Set{KeyType: nftables.TypeInetService, Interval: true}, elems: intervalElems(ranges)}
	})
	return []expr.Any{dport(reg1), &expr.Lookup{SourceRegister: reg1, SetName: s.set.Name, SetID: s.set.ID}}
}

func (p *program) icmpMatch(proto ir.Protocol, types []uint8) []expr.Any {
	types = slices.Clone(types)
	slices.Sort(types)
	types = slices.Compact(types)
	load := &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1}
	if len(types) == 1 {
		return []expr.Any{load, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{types[0]}}}
	}
	s := p.set(contentKey("icmp", byte(proto), types), func() *set {
		kt := nftables.TypeICMPType
		if proto == ir.ProtoICMPv6 {
			kt = nftables.TypeICMP6Type
		}
		s := &set{set: &nftables.Set{KeyType: kt}}
		for _, t := range types {
			s.elems = append(s.elems, nftables.SetElement{Key: []byte{t}})
		}
		return s
	})
	return []expr.Any{load, &expr.Lookup{SourceRegister: reg1, SetName: s.set.Name, SetID: s.set.ID}}
}

// addrPortProtos are the protocols of a family's AddrPorts, sorted.
func addrPortProtos(aps []ir.AddrPort, f ir.Family) []ir.Protocol {
	var out []ir.Protocol
	for _, ap := range aps {
		if isFamily(ap.Addr, f) && !slices.Contains(out, ap.Protocol) {
			out = append(out, ap.Protocol)
		}
	}
	slices.Sort(out)
	return out
}

// addrPortSet is the (address . port) set of one family and protocol.
func (p *program) addrPortSet(f ir.Family, proto ir.Protocol, aps []ir.AddrPort) *set {
	var keys [][]byte
	for _, ap := range aps {
		if ap.Protocol != proto || !isFamily(ap.Addr, f) {
			continue
		}
		k := slices.Concat(ap.Addr.Unmap().AsSlice(), be16(ap.Port), []byte{0, 0}) // port padded to 4 bytes
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b []byte) int { return strings.Compare(string(a), string(b)) })
	keys = slices.CompactFunc(keys, func(a, b []byte) bool { return string(a) == string(b) })
	return p.set(contentKey("addrport", byte(proto)<<2|byte(f), keys...), func() *set {
		addr := nftables.TypeIPAddr
		if f == ir.IPv6 {
			addr = nftables.TypeIP6Addr
		}
		s := &set{set: &nftables.Set{KeyType: nftables.MustConcatSetType(addr, nftables.TypeInetService),
			Concatenation: true}}
		for _, k := range keys {
			s.elems = append(s.elems, nftables.SetElement{Key: k})
		}
		return s
	})
}

// addrPortMatch: peer address into reg 8…, th dport into the register
// after it, one lookup of the concatenation.
func addrPortMatch(f ir.Family, d ir.Direction, s *set) []expr.Any {
	portReg := uint32(reg32A + 1)
	if f == ir.IPv6 {
		portReg = reg32A + 4
	}
	return []expr.Any{addrLoad(f, d, reg32A), dport(portReg),
		&expr.Lookup{SourceRegister: reg32A, SetName: s.set.Name, SetID: s.set.ID}}
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// chunks splits a set's elements so that each message's encoded elements
// stay under chunkBytes; an interval's start and end stay together.
func chunks(elems []nftables.SetElement) [][]nftables.SetElement {
	var out [][]nftables.SetElement
	start, size := 0, 0
	for i := 0; i < len(elems); {
		n := 1
		if i+1 < len(elems) && elems[i+1].IntervalEnd {
			n = 2
		}
		sz := 0
		for _, e := range elems[i : i+n] {
			sz += elemSize(e)
		}
		if size+sz > chunkBytes && i > start {
			out = append(out, elems[start:i])
			start, size = i, 0
		}
		size += sz
		i += n
	}
	if start < len(elems) {
		out = append(out, elems[start:])
	}
	return out
}

// elemSize is an upper bound of one element's netlink encoding: the item's
// attribute, its flags, and the nested key value.
func elemSize(e nftables.SetElement) int {
	align := func(n int) int { return (n + 3) &^ 3 }
	n := 4 + 4 + 4 + align(len(e.Key))
	if e.IntervalEnd {
		n += 8
	}
	return n
}
