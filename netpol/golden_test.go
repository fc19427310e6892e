package netpol_test

// Golden text of each rule kind: the head every chain starts with (replies,
// ND/MLD, acceptICMP/acceptICMPv6, allow entries), peers as
// address sets per family, ports and ranges per protocol, protocol-only,
// every peer and port, egress named ports as (address, protocol, port), and
// the final drop; plus deny-all (caches not synced) and the empty ruleset.

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/netpoltest"
)

func goldenSnapshot() *netpoltest.Snapshot {
	s := netpoltest.New()
	s.AddNamespace("x", map[string]string{"team": "red"})
	s.AddNamespace("y", map[string]string{"team": "blue"})
	s.AddPeer(&netpol.Peer{Namespace: "x", Name: "client", Labels: map[string]string{"app": "client"},
		Addrs: map[netpol.Identity][]netip.Addr{{NAD: "x/net"}: netpoltest.Addrs("10.0.0.2", "fd00::2"), {NAD: "x/other"}: netpoltest.Addrs("10.9.0.2")}})
	s.AddPeer(&netpol.Peer{Namespace: "y", Name: "db", Labels: map[string]string{"app": "db"},
		NamedPorts: []netpol.NamedPort{{Name: "sql", Protocol: netpol.ProtoTCP, Port: 5432}, {Name: "sql", Protocol: netpol.ProtoUDP, Port: 5433}},
		Addrs:      map[netpol.Identity][]netip.Addr{{NAD: "x/net"}: netpoltest.Addrs("10.0.1.5")}})
	return s
}

func goldenTarget() netpol.Target {
	return netpol.Target{Namespace: "x", Name: "server", Labels: map[string]string{"app": "server"},
		NamedPorts: []netpol.NamedPort{{Name: "web", Protocol: netpol.ProtoTCP, Port: 8080}},
		Interfaces: []netpol.Interface{
			{IfName: "net1", Identity: netpol.Identity{NAD: "x/net"}, IPs: netpoltest.Addrs("10.0.0.1", "fd00::1")},
			{IfName: "net2", Identity: netpol.Identity{Node: "storage"}},
		}}
}

func TestGoldenText(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy string
		opts   netpol.Options
		want   string
	}{
		{"every peer and port; head with ICMP and allow entries", `{podSelector: {}, ingress: [{}]}`, netpol.Options{
			AcceptICMP: true, AcceptICMPv6: true,
			Allow: []netpol.Allow{
				{Direction: netpol.Ingress, Protocol: netpol.ProtoUDP, Ports: []netpol.PortRange{{First: 547, Last: 547}, {First: 546, Last: 546}},
					CIDRs: []netip.Prefix{netip.MustParsePrefix("fe80::/10")}},
				{Direction: netpol.Ingress, Protocol: netpol.ProtoTCP, Ports: []netpol.PortRange{{First: 9999, Last: 9999}}},
				{Direction: netpol.Egress, Protocol: netpol.ProtoTCP},
			}}, `
table inet nri-cni {
	chain ingress net1 {
		ct state established,related accept comment "replies"
		meta nfproto ipv6 meta l4proto ipv6-icmp icmpv6 type { 130, 131, 132, 133, 134, 135, 136, 143 } accept comment "nd, mld"
		meta nfproto ipv4 meta l4proto icmp accept comment "acceptICMP"
		meta nfproto ipv6 meta l4proto ipv6-icmp accept comment "acceptICMPv6"
		meta nfproto ipv6 ip6 saddr { fe80::/10 } meta l4proto udp th dport { 546-547 } accept comment "allow[0]"
		meta l4proto tcp th dport { 9999 } accept comment "allow[1]"
		accept comment "x/p ingress[0]"
		drop comment "default deny"
	}
}`},
		{"peers per family, ports, ranges, protocol-only, named ingress port", `
podSelector: {matchLabels: {app: server}}
ingress:
- from: [{podSelector: {matchLabels: {app: client}}}, {ipBlock: {cidr: 192.168.0.0/16, except: [192.168.1.0/24]}}]
  ports: [{port: 443}, {port: 80}, {port: 6000, endPort: 6900}, {port: 81, endPort: 85}, {protocol: UDP}, {port: web}]
- from: [{namespaceSelector: {matchLabels: {team: blue}}}]
  ports: [{protocol: SCTP, port: 9}]`, netpol.Options{}, `
table inet nri-cni {
	chain ingress net1 {
		ct state established,related accept comment "replies"
		meta nfproto ipv6 meta l4proto ipv6-icmp icmpv6 type { 130, 131, 132, 133, 134, 135, 136, 143 } accept comment "nd, mld"
		meta nfproto ipv4 ip saddr { 10.0.0.2/32, 192.168.0.0/24, 192.168.2.0/23, 192.168.4.0/22, 192.168.8.0/21, 192.168.16.0/20, 192.168.32.0/19, 192.168.64.0/18, 192.168.128.0/17 } meta l4proto tcp th dport { 80-85, 443, 6000-6900, 8080 } accept comment "x/p ingress[0]"
		meta nfproto ipv6 ip6 saddr { fd00::2/128 } meta l4proto tcp th dport { 80-85, 443, 6000-6900, 8080 } accept comment "x/p ingress[0]"
		meta nfproto ipv4 ip saddr { 10.0.0.2/32, 192.168.0.0/24, 192.168.2.0/23, 192.168.4.0/22, 192.168.8.0/21, 192.168.16.0/20, 192.168.32.0/19, 192.168.64.0/18, 192.168.128.0/17 } meta l4proto udp accept comment "x/p ingress[0]"
		meta nfproto ipv6 ip6 saddr { fd00::2/128 } meta l4proto udp accept comment "x/p ingress[0]"
		meta nfproto ipv4 ip saddr { 10.0.1.5/32 } meta l4proto sctp th dport { 9 } accept comment "x/p ingress[1]"
		drop comment "default deny"
	}
}`},
		{"egress named port per destination; ingress isolated with no rule", `
podSelector: {}
policyTypes: [Ingress, Egress]
egress:
- to: [{namespaceSelector: {}}]
  ports: [{port: sql}, {protocol: UDP, port: sql}, {port: 53, protocol: UDP}]`, netpol.Options{}, `
table inet nri-cni {
	chain ingress net1 {
		ct state established,related accept comment "replies"
		meta nfproto ipv6 meta l4proto ipv6-icmp icmpv6 type { 130, 131, 132, 133, 134, 135, 136, 143 } accept comment "nd, mld"
		drop comment "default deny"
	}
	chain egress net1 {
		ct state established,related accept comment "replies"
		meta nfproto ipv6 meta l4proto ipv6-icmp icmpv6 type { 130, 131, 132, 133, 134, 135, 136, 143 } accept comment "nd, mld"
		meta nfproto ipv4 ip daddr { 10.0.0.2/32, 10.0.1.5/32 } meta l4proto udp th dport { 53 } accept comment "x/p egress[0]"
		meta nfproto ipv6 ip6 daddr { fd00::2/128 } meta l4proto udp th dport { 53 } accept comment "x/p egress[0]"
		meta nfproto ipv4 ip daddr . meta l4proto . th dport { 10.0.1.5 . tcp . 5432, 10.0.1.5 . udp . 5433 } accept comment "x/p egress[0]"
		drop comment "default deny"
	}
}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := goldenSnapshot()
			s.AddPolicy(netpoltest.Policy("x", "p", "net", c.policy))
			rs, notes := netpol.Render(goldenTarget(), s, c.opts, nil)
			if len(notes) > 0 {
				t.Errorf("notes: %+v", notes)
			}
			got := rs.String()
			if want := "# digest " + rs.Digest + c.want + "\n"; got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestGoldenDenyAllAndEmpty(t *testing.T) {
	s := goldenSnapshot()
	s.SetSynced(false)
	rs, notes := netpol.Render(goldenTarget(), s, netpol.Options{AcceptICMP: true}, nil)
	deny := "\ntable inet nri-cni {\n"
	for _, ch := range []string{"ingress net1", "egress net1", "ingress net2", "egress net2"} {
		deny += "\tchain " + ch + ` {
		ct state established,related accept comment "replies"
		meta nfproto ipv6 meta l4proto ipv6-icmp icmpv6 type { 130, 131, 132, 133, 134, 135, 136, 143 } accept comment "nd, mld"
		drop comment "deny all"
	}
`
	}
	deny += "}\n"
	if got := strings.TrimPrefix(rs.String(), "# digest "+rs.Digest); got != deny {
		t.Errorf("not synced: got:\n%s\nwant:\n%s", got, deny)
	}
	if rs.Digest != netpol.DenyAll(goldenTarget(), netpol.Options{}).Digest {
		t.Error("not synced: not DenyAll's ruleset")
	}
	if len(notes) != 1 || notes[0].Reason != "NotSynced" || notes[0].Namespace != "x" {
		t.Errorf("not synced: notes %+v, want one NotSynced", notes)
	}
	s.SetSynced(true)
	rs, _ = netpol.Render(goldenTarget(), s, netpol.Options{}, nil)
	if !rs.Empty() || rs.String() != "# digest "+rs.Digest+"\n# nothing isolated: no table\n" {
		t.Errorf("no policy: got\n%s", rs)
	}
}
