package ir

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Seal sorts the chains and sets the digest: sha256 over FormatVersion and a canonical binary
// encoding of the chains, every field in a fixed order with its length.
// Everything a Ruleset holds is sorted before this, so equal input gives
// an equal digest.
func Seal(rs Ruleset) Ruleset {
	slices.SortStableFunc(rs.Chains, func(a, b Chain) int {
		if c := strings.Compare(a.IfName, b.IfName); c != 0 {
			return c
		}
		return int(a.Direction) - int(b.Direction)
	})
	h := sha256.New()
	b := make([]byte, 0, 4096)
	b = binary.BigEndian.AppendUint32(append(b, "nri-cni netpol"...), FormatVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(rs.Chains)))
	for _, c := range rs.Chains {
		b = appendString(b, c.IfName)
		b = append(b, byte(c.Direction))
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.Rules)))
		for i := range c.Rules {
			b = c.Rules[i].appendCanonical(b)
			if len(b) > 32<<10 {
				h.Write(b)
				b = b[:0]
			}
		}
	}
	h.Write(b)
	rs.Digest = hex.EncodeToString(h.Sum(nil))
	return rs
}

func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		s := a.As4()
		return append(append(b, 4), s[:]...)
	}
	s := a.As16()
	return append(append(b, 16), s[:]...)
}

func (rl *Rule) appendCanonical(b []byte) []byte {
	flags := byte(0)
	if rl.Established {
		flags = 1
	}
	b = append(b, flags, byte(rl.Family), byte(rl.Protocol), byte(rl.Verdict))
	// A nil and an empty list differ (nil matches anything).
	list := func(b []byte, n int, isNil bool) []byte {
		if isNil {
			return append(b, 0)
		}
		return binary.BigEndian.AppendUint32(append(b, 1), uint32(n))
	}
	b = list(b, len(rl.Addrs), rl.Addrs == nil)
	for _, p := range rl.Addrs {
		b = append(appendAddr(b, p.Addr()), byte(p.Bits()))
	}
	b = list(b, len(rl.Ports), rl.Ports == nil)
	for _, p := range rl.Ports {
		b = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(b, p.First), p.Last)
	}
	b = list(b, len(rl.ICMPTypes), rl.ICMPTypes == nil)
	b = append(b, rl.ICMPTypes...)
	b = list(b, len(rl.AddrPorts), rl.AddrPorts == nil)
	for _, ap := range rl.AddrPorts {
		b = binary.BigEndian.AppendUint16(append(appendAddr(b, ap.Addr), byte(ap.Protocol)), ap.Port)
	}
	return appendString(b, rl.Comment)
}

// String is the ruleset in an nft-like text, one rule a line: what the nft
// package programs, for reading and for golden tests.
func (r Ruleset) String() string {
	return fmt.Sprintf("# digest %s\n", r.Digest) + r.body()
}

func (r Ruleset) body() string {
	var b strings.Builder
	if r.Empty() {
		b.WriteString("# nothing isolated: no table\n")
		return b.String()
	}
	b.WriteString("table inet nri-cni {\n")
	for _, c := range r.Chains {
		fmt.Fprintf(&b, "\tchain %s %s {\n", c.Direction, c.IfName)
		for i := range c.Rules {
			b.WriteString("\t\t")
			b.WriteString(c.Rules[i].text(c.Direction))
			b.WriteString("\n")
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

var protoNames = map[Protocol]string{ProtoICMP: "icmp", ProtoTCP: "tcp", ProtoUDP: "udp", ProtoICMPv6: "ipv6-icmp", ProtoSCTP: "sctp"}

func (p Protocol) String() string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return strconv.Itoa(int(p))
}

func (f Family) String() string {
	switch f {
	case IPv4:
		return "ipv4"
	case IPv6:
		return "ipv6"
	}
	return "any"
}

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Drop:
		return "drop"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// text is one rule in nft's words; the peer is the source on ingress and
// the destination on egress.
func (rl *Rule) text(d Direction) string {
	var parts []string
	if rl.Established {
		parts = append(parts, "ct state established,related")
	}
	if rl.Family != FamilyAny {
		parts = append(parts, "meta nfproto "+rl.Family.String())
	}
	dir := "saddr"
	if d == Egress {
		dir = "daddr"
	}
	ip := "ip"
	if rl.Family == IPv6 {
		ip = "ip6"
	}
	if rl.Addrs != nil {
		elems := make([]string, len(rl.Addrs))
		for i, p := range rl.Addrs {
			elems[i] = p.String()
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", ip, dir, set(elems)))
	}
	if rl.Protocol != ProtoAny {
		parts = append(parts, "meta l4proto "+rl.Protocol.String())
	}
	if rl.Ports != nil {
		elems := make([]string, len(rl.Ports))
		for i, p := range rl.Ports {
			elems[i] = strconv.Itoa(int(p.First))
			if p.Last != p.First {
				elems[i] += "-" + strconv.Itoa(int(p.Last))
			}
		}
		parts = append(parts, "th dport "+set(elems))
	}
	if rl.ICMPTypes != nil {
		elems := make([]string, len(rl.ICMPTypes))
		for i, t := range rl.ICMPTypes {
			elems[i] = strconv.Itoa(int(t))
		}
		kind := "icmp"
		if rl.Protocol == ProtoICMPv6 {
			kind = "icmpv6"
		}
		parts = append(parts, kind+" type "+set(elems))
	}
	if rl.AddrPorts != nil {
		elems := make([]string, len(rl.AddrPorts))
		for i, ap := range rl.AddrPorts {
			elems[i] = fmt.Sprintf("%s . %s . %d", ap.Addr, ap.Protocol, ap.Port)
		}
		parts = append(parts, fmt.Sprintf("%s %s . meta l4proto . th dport %s", ip, dir, set(elems)))
	}
	parts = append(parts, rl.Verdict.String())
	if rl.Comment != "" {
		parts = append(parts, "comment "+strconv.Quote(rl.Comment))
	}
	return strings.Join(parts, " ")
}

func set(elems []string) string { return "{ " + strings.Join(elems, ", ") + " }" }
