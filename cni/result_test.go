package cni

import (
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cidr(t *testing.T, s string) net.IPNet {
	t.Helper()
	ip, n, err := net.ParseCIDR(s)
	require.NoError(t, err)
	n.IP = ip
	return *n
}

func dst(t *testing.T, s string) net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	require.NoError(t, err)
	return *n
}

// TestSummarizeMTUAndGatewayAsTheNADClient: the MTU and the default routes'
// gateways nri-cni keeps of a result are what the NPWG client library
// (v1.7.7, CreateNetworkStatus) writes as "mtu" and "gateway" for the same
// result: the cases its own tests cover, and a few more.
func TestSummarizeMTUAndGatewayAsTheNADClient(t *testing.T) {
	one := func(mtu int, routes ...*types.Route) *current.Result {
		idx := 0
		return &current.Result{CNIVersion: "1.1.0",
			Interfaces: []*current.Interface{{Name: "net1", Mac: "92:79:27:01:7c:cf", Sandbox: "/proc/1123/ns/net", Mtu: mtu}},
			IPs: []*current.IPConfig{{Address: cidr(t, "1.1.1.3/24"), Interface: &idx},
				{Address: cidr(t, "2001::1/64"), Interface: &idx}},
			Routes: routes}
	}
	for _, tc := range []struct {
		name     string
		res      *current.Result
		mtu      int
		gateways []string
	}{
		{"an MTU, no routes", one(9000), 9000, nil},
		{"no MTU", one(0), 0, nil},
		{"a default route", one(1500, &types.Route{Dst: dst(t, "0.0.0.0/0"), GW: net.ParseIP("10.10.10.10")}), 1500, []string{"10.10.10.10"}},
		{"a route with no destination counts as default",
			one(0, &types.Route{Dst: dst(t, "0.0.0.0/0"), GW: net.ParseIP("10.10.10.10")}, &types.Route{GW: net.ParseIP("20.20.20.20")}),
			0, []string{"10.10.10.10", "20.20.20.20"}},
		{"not a default route", one(0, &types.Route{Dst: dst(t, "10.10.10.0/24"), GW: net.ParseIP("10.10.10.10")}), 0, nil},
		{"both families", one(0, &types.Route{Dst: dst(t, "0.0.0.0/0"), GW: net.ParseIP("1.1.1.1")},
			&types.Route{Dst: dst(t, "::/0"), GW: net.ParseIP("2001::fe")}), 0, []string{"1.1.1.1", "2001::fe"}},
		// The library tests the destination address only.
		{"0.0.0.0 with any prefix", one(0, &types.Route{Dst: dst(t, "0.0.0.0/1"), GW: net.ParseIP("1.1.1.1")}), 0, []string{"1.1.1.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := summarize(tc.res, "net1")
			require.NoError(t, err)
			assert.Equal(t, tc.mtu, got.MTU)
			assert.Equal(t, tc.gateways, got.DefaultGateways)
			lib, err := nadutils.CreateNetworkStatus(tc.res, "ns/net", false, nil)
			require.NoError(t, err)
			assert.Equal(t, lib.Mtu, got.MTU, "the client library's mtu")
			assert.Equal(t, lib.Gateway, got.DefaultGateways, "the client library's gateway")
		})
	}
}

// TestSummarizeDefaultRouteWithoutGateway: a default route without "gw"
// goes via the address's gateway of its family (how the reference plugins
// install it); the client library would write "<nil>".
func TestSummarizeDefaultRouteWithoutGateway(t *testing.T) {
	idx := 0
	res := &current.Result{CNIVersion: "1.1.0",
		Interfaces: []*current.Interface{{Name: "net1", Sandbox: "/x", Mtu: 1450}, {Name: "host-veth"}},
		IPs: []*current.IPConfig{{Address: cidr(t, "10.1.0.5/24"), Gateway: net.ParseIP("10.1.0.1"), Interface: &idx},
			{Address: cidr(t, "fd00::5/64"), Interface: &idx}},
		Routes: []*types.Route{{Dst: dst(t, "0.0.0.0/0")}, {Dst: dst(t, "::/0")}}}
	got, err := summarize(res, "net1")
	require.NoError(t, err)
	assert.Equal(t, []string{"10.1.0.1"}, got.DefaultGateways, "IPv4 via the address's gateway; IPv6 has none: a device route")
	assert.Equal(t, 1450, got.MTU)
	lib, err := nadutils.CreateNetworkStatus(res, "ns/net", false, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"<nil>", "<nil>"}, lib.Gateway, "what nri-cni does not copy")

	// An older result (0.4.0) has no MTU: none is written.
	old := &current.Result{CNIVersion: "1.1.0", Interfaces: []*current.Interface{{Name: "net1", Sandbox: "/x"}}}
	conv, err := old.GetAsVersion("0.4.0")
	require.NoError(t, err)
	got, err = summarize(conv, "net1")
	require.NoError(t, err)
	assert.Zero(t, got.MTU)
}
