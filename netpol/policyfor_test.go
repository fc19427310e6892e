package netpol

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestParsePolicyFor(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("net%d", i)
	}
	for _, c := range []struct {
		raw  string
		want string // parsed entries, "*" marks a bare one
		bad  int
	}{
		{"", "[]", 0},
		{"  ", "[]", 0},
		{"net1", "[ns/net1*]", 0},
		{" net1 , other/net2 ", "[ns/net1* other/net2]", 0},
		{",,net1,,", "[ns/net1*]", 0},
		{"ns / net1", "[ns/net1]", 0},
		{"\tnet1\n", "[ns/net1*]", 0},
		{"a/b/c", "[]", 1},
		{"/net1", "[]", 1},
		{"ns/", "[]", 1},
		{"NS/net1", "[]", 1},
		{"net_1, net1", "[ns/net1*]", 1},
		{"a.b-c/net.one", "[]", 1}, // a namespace is a DNS label: no dots
		{"ab/net.one", "[ab/net.one]", 0},
		{"net1, net1, ns/net1", "[ns/net1* ns/net1]", 0},
		{strings.Repeat("x", 254), "[]", 1},
		{strings.Join(many, ","), "32 entries", 8},
	} {
		got, bad := parsePolicyFor(c.raw, "ns")
		s := make([]string, len(got))
		for i, r := range got {
			s[i] = r.Namespace + "/" + r.Name
			if r.Bare {
				s[i] += "*"
			}
		}
		str := fmt.Sprint(s)
		if c.want == "32 entries" {
			str = fmt.Sprintf("%d entries", len(got))
		}
		if len(c.raw) > 40 {
			c.raw = c.raw[:40] + "…"
		}
		if str != c.want || len(bad) != c.bad {
			t.Errorf("%q: got %s and %d invalid %q, want %s and %d", c.raw, str, len(bad), bad, c.want, c.bad)
		}
	}
}

// Identities of each attachment kind (design-42 §4.3): a NAD attachment,
// a node (confDir) network, a defaultNetworks entry or a claim's network
// are all either a NAD "ns/name" or a node network's name.
func TestPolicyForMatchesIdentities(t *testing.T) {
	nad := func(s string) Identity { return Identity{NAD: s} }
	node := func(s string) Identity { return Identity{Node: s} }
	for _, c := range []struct {
		raw string
		id  Identity
		ok  bool
	}{
		{"net-a", nad("ns/net-a"), true},          // annotation or claim NAD of the policy's namespace
		{"ns/net-a", nad("ns/net-a"), true},       // the same, spelled out
		{"net-a", nad("other/net-a"), false},      // a bare name is the policy's namespace only
		{"other/net-a", nad("other/net-a"), true}, // a cross-namespace NAD
		{"net-a", node("net-a"), true},            // confDir network, nri.conf networks, defaultNetworks "name"
		{"ns/net-a", node("net-a"), false},        // a node network has no namespace
		{"net-b", node("net-a"), false},
		{"", nad("ns/net-a"), false},
		{"a/b/c", nad("a/b/c"), false}, // an invalid entry matches nothing
		{"net-a", Identity{}, false},
	} {
		if got := MatchesPolicyFor(c.raw, "ns", c.id); got != c.ok {
			t.Errorf("policy-for %q vs %+v: got %v, want %v", c.raw, c.id, got, c.ok)
		}
	}
}

func TestIntervals(t *testing.T) {
	pf := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	for _, c := range []struct {
		cidr   string
		except []string
		more   []string // other peers of the rule (unioned)
		want   string
	}{
		{"10.0.0.0/24", nil, nil, "[10.0.0.0/24]"},
		{"10.0.0.0/24", []string{"10.0.0.128/25"}, nil, "[10.0.0.0/25]"},
		{"10.0.0.0/24", []string{"10.0.0.13/32", "10.0.0.14/32"}, nil,
			"[10.0.0.0/29 10.0.0.8/30 10.0.0.12/32 10.0.0.15/32 10.0.0.16/28 10.0.0.32/27 10.0.0.64/26 10.0.0.128/25]"},
		{"10.0.0.0/24", []string{"10.0.0.0/24"}, nil, "[]"},
		{"10.0.0.0/24", []string{"10.0.0.0/25", "10.0.0.64/26"}, nil, "[10.0.0.128/25]"},     // overlapping excepts
		{"10.0.0.0/24", []string{"10.0.0.13/32"}, []string{"10.0.0.13/32"}, "[10.0.0.0/24]"}, // union with another peer
		{"10.0.0.0/25", nil, []string{"10.0.0.128/25", "10.0.1.0/24"}, "[10.0.0.0/23]"},      // adjacent merge
		{"0.0.0.0/0", []string{"255.255.255.255/32"}, nil, "[0.0.0.0/1 128.0.0.0/2 192.0.0.0/3 224.0.0.0/4 240.0.0.0/5 248.0.0.0/6 252.0.0.0/7 254.0.0.0/8 255.0.0.0/9 255.128.0.0/10 255.192.0.0/11 255.224.0.0/12 255.240.0.0/13 255.248.0.0/14 255.252.0.0/15 255.254.0.0/16 255.255.0.0/17 255.255.128.0/18 255.255.192.0/19 255.255.224.0/20 255.255.240.0/21 255.255.248.0/22 255.255.252.0/23 255.255.254.0/24 255.255.255.0/25 255.255.255.128/26 255.255.255.192/27 255.255.255.224/28 255.255.255.240/29 255.255.255.248/30 255.255.255.252/31 255.255.255.254/32]"},
		{"::/0", []string{"::/1"}, nil, "[8000::/1]"},
		{"fd00::/64", []string{"fd00::1/128"}, []string{"fd00::1/128"}, "[fd00::/64]"},
	} {
		var ex []span
		for _, e := range c.except {
			ex = append(ex, prefixSpan(pf(e)))
		}
		var set addrSet
		p := pf(c.cidr)
		set.addSpans(familyIndex(p.Addr()), subtract(prefixSpan(p), mergeSpans(ex)))
		for _, m := range c.more {
			set.addSpans(familyIndex(pf(m).Addr()), []span{prefixSpan(pf(m))})
		}
		got := set.prefixes()
		all := append(got[0], got[1]...)
		if fmt.Sprint(all) != c.want {
			t.Errorf("%s except %v ∪ %v: got %v, want %s", c.cidr, c.except, c.more, all, c.want)
		}
	}
}
