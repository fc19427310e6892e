package nft_test

// Fixtures of the privileged tests: fresh namespaces (testutils.NewNS:
// unique names, removed on cleanup), veth links between them, and the
// Programmer.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/google/nftables"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/nft"
)

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates network namespaces and programs nf_tables in them (CI runs as root)")
	}
}

// newNS is a fresh network namespace with lo up, removed when tb ends.
func newNS(tb testing.TB) ns.NetNS {
	tb.Helper()
	requireRoot(tb)
	n, err := testutils.NewNS()
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	require.NoError(tb, n.Do(func(ns.NetNS) error {
		// No DAD in this namespace: test addresses are usable at once.
		for _, f := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/accept_dad", []byte("0"), 0o644); err != nil {
				return err
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}))
	return n
}

// target is n as the Programmer takes it.
func target(tb testing.TB, n ns.NetNS) netns.Netns {
	tb.Helper()
	id, err := netns.Identify(n.Path())
	require.NoError(tb, err)
	return netns.Netns{Path: n.Path(), ID: id}
}

func programmer(tb testing.TB) *nft.Programmer {
	tb.Helper()
	p, err := nft.New()
	require.NoError(tb, err)
	return p
}

// link connects a and b with a veth: ifA in a, ifB in b, both up, with the
// addresses given (IPv6 without DAD, usable at once).
func link(tb testing.TB, a ns.NetNS, ifA string, addrsA []string, b ns.NetNS, ifB string, addrsB []string) {
	tb.Helper()
	require.NoError(tb, a.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifA}, PeerName: ifB,
			PeerNamespace: netlink.NsFd(int(b.Fd()))})
	}))
	up := func(n ns.NetNS, name string, addrs []string) {
		require.NoError(tb, n.Do(func(ns.NetNS) error {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			for _, s := range addrs {
				a, err := netlink.ParseAddr(s)
				if err != nil {
					return err
				}
				if a.IP.To4() == nil {
					a.Flags = 0x80 // IFA_F_NODAD
				}
				if err := netlink.AddrAdd(l, a); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	up(a, ifA, addrsA)
	up(b, ifB, addrsB)
	ready(tb, a, ifA)
	ready(tb, b, ifB)
}

// ready waits (bounded) until name has carrier and no tentative address:
// the kernel sets carrier on a veth asynchronously (linkwatch), and IPv6
// addresses stay tentative until then, even without DAD.
func ready(tb testing.TB, n ns.NetNS, name string) {
	tb.Helper()
	require.NoError(tb, n.Do(func(ns.NetNS) error {
		for i := 0; ; i++ {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			tentative := false
			for _, a := range addrs {
				tentative = tentative || a.Flags&unix.IFA_F_TENTATIVE != 0
			}
			if l.Attrs().OperState == netlink.OperUp && !tentative {
				return nil
			}
			if i == 500 {
				return fmt.Errorf("%s: no carrier or tentative addresses after 10s", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}))
}

// rules reads a chain of n's table back.
func rules(tb testing.TB, n ns.NetNS, chain string) []*nftables.Rule {
	tb.Helper()
	var out []*nftables.Rule
	require.NoError(tb, n.Do(func(ns.NetNS) error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		out, err = c.GetRules(&nftables.Table{Family: nftables.TableFamilyINet, Name: nft.TableName},
			&nftables.Chain{Name: chain})
		return err
	}))
	return out
}

func apply(tb testing.TB, p *nft.Programmer, n ns.NetNS, rs ir.Ruleset) {
	tb.Helper()
	require.NoError(tb, p.Apply(context.Background(), target(tb, n), rs))
}

func digest(tb testing.TB, p *nft.Programmer, n ns.NetNS) string {
	tb.Helper()
	d, err := p.Digest(context.Background(), target(tb, n))
	require.NoError(tb, err)
	return d
}

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

// chain is one (ifname, direction) chain: established first, drop last.
func chain(ifname string, d ir.Direction, middle ...ir.Rule) ir.Chain {
	rs := []ir.Rule{{Established: true, Verdict: ir.Accept, Comment: "replies"}}
	rs = append(rs, middle...)
	rs = append(rs, ir.Rule{Verdict: ir.Drop, Comment: "default deny"})
	return ir.Chain{IfName: ifname, Direction: d, Rules: rs}
}

// nd is the ND rule every isolated chain carries (the renderer's).
var nd = ir.Rule{Family: ir.IPv6, Protocol: ir.ProtoICMPv6,
	ICMPTypes: []uint8{130, 131, 132, 133, 134, 135, 136, 143}, Verdict: ir.Accept, Comment: "ND and MLD"}
