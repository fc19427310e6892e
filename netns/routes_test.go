package netns_test

import (
	"errors"
	"net"
	"os"
	"sort"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/netns"
)

// podNetns is a fresh network namespace shaped like a pod's: eth0 with
// 10.9.0.2/24 and the default route via 10.9.0.1 (the runtime's), net1 with
// 10.8.0.2/24 and fd08::2/64 (a secondary network). Both are veth ends
// whose peers stay inside the namespace too.
func podNetns(t *testing.T) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	n, err := testutils.NewNS()
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	require.NoError(t, n.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			return err
		}
		for _, l := range []struct{ name, peer, addr string }{
			{"eth0", "peer0", "10.9.0.2/24"}, {"net1", "peer1", "10.8.0.2/24"},
		} {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.name}, PeerName: l.peer}); err != nil {
				return err
			}
			for _, name := range []string{l.name, l.peer} {
				link, err := netlink.LinkByName(name)
				if err != nil {
					return err
				}
				if err := netlink.LinkSetUp(link); err != nil {
					return err
				}
			}
			link, _ := netlink.LinkByName(l.name)
			addr, _ := netlink.ParseAddr(l.addr)
			if err := netlink.AddrAdd(link, addr); err != nil {
				return err
			}
		}
		net1, _ := netlink.LinkByName("net1")
		v6, _ := netlink.ParseAddr("fd08::2/64")
		v6.Flags = 0x80 // IFA_F_NODAD: usable at once
		if err := netlink.AddrAdd(net1, v6); err != nil {
			return err
		}
		eth0, _ := netlink.LinkByName("eth0")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP("10.9.0.1")})
	}))
	return n
}

func defaults(t *testing.T, path string) []string {
	t.Helper()
	got, err := netns.DefaultRoutes(path)
	require.NoError(t, err)
	sort.Strings(got)
	return got
}

func TestSetDefaultRoutes(t *testing.T) {
	n := podNetns(t)
	require.Equal(t, []string{"10.9.0.1 dev eth0"}, defaults(t, n.Path()))

	require.NoError(t, netns.SetDefaultRoutes(n.Path(), "net1", []net.IP{net.ParseIP("10.8.0.1"), net.ParseIP("fd08::1")}))
	assert.Equal(t, []string{"10.8.0.1 dev net1", "fd08::1 dev net1"}, defaults(t, n.Path()),
		"the IPv4 default moved from eth0 to net1; IPv6 had none and has one now")
}

func TestSetDefaultRoutesIsAllOrNothing(t *testing.T) {
	n := podNetns(t)
	// The IPv4 gateway is fine, the IPv6 one is not on net1's subnet: the
	// IPv4 change is undone, eth0 keeps the default route.
	err := netns.SetDefaultRoutes(n.Path(), "net1", []net.IP{net.ParseIP("10.8.0.1"), net.ParseIP("fd99::1")})
	require.Error(t, err)
	assert.True(t, errors.Is(err, netns.ErrDefaultRoute), "%v", err)
	assert.Contains(t, err.Error(), "via fd99::1 dev net1")
	assert.Equal(t, []string{"10.9.0.1 dev eth0"}, defaults(t, n.Path()))

	err = netns.SetDefaultRoutes(n.Path(), "net9", []net.IP{net.ParseIP("10.8.0.1")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "net9")
	assert.Equal(t, []string{"10.9.0.1 dev eth0"}, defaults(t, n.Path()))
}

func TestLinkNames(t *testing.T) {
	n := podNetns(t)
	got, err := netns.LinkNames(n.Path())
	require.NoError(t, err)
	sort.Strings(got)
	require.Equal(t, []string{"eth0", "lo", "net1", "peer0", "peer1"}, got)
	_, err = netns.LinkNames("/nonexistent/netns")
	require.Error(t, err)
}

// SetLinksUp sets the named interfaces down and up again in the pod's
// namespace, skips one that is not there, and leaves the others alone.
func TestSetLinksUp(t *testing.T) {
	n := podNetns(t)
	state := func(name string) bool {
		t.Helper()
		var up bool
		require.NoError(t, n.Do(func(ns.NetNS) error {
			l, err := netlink.LinkByName(name)
			if err == nil {
				up = l.Attrs().Flags&net.FlagUp != 0
			}
			return err
		}))
		return up
	}
	require.NoError(t, netns.SetLinksUp(n.Path(), []string{"net1", "gone0"}, false))
	assert.False(t, state("net1"), "net1 down")
	assert.True(t, state("eth0"), "eth0 untouched")
	require.NoError(t, netns.SetLinksUp(n.Path(), []string{"net1"}, true))
	assert.True(t, state("net1"), "net1 up again")
	var addrs []string
	require.NoError(t, n.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err != nil {
			return err
		}
		list, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		for _, a := range list {
			if a.IP.IsGlobalUnicast() {
				addrs = append(addrs, a.IPNet.String())
			}
		}
		return err
	}))
	sort.Strings(addrs)
	assert.Equal(t, []string{"10.8.0.2/24", "fd08::2/64"}, addrs, "the addresses survive, IPv6's too")
}
