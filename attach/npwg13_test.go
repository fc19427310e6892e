package attach_test

// NPWG v1.3 as Multus users write it, through the engine: the bare "ips"
// reaching the plugin, what the spec says to ignore being ignored and the
// pod told, and network-status carrying the result's MTU and the default
// routes' gateways.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/plan"
)

func TestNPWGBareIPReachesThePluginAsWritten(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", map[string]any{"capabilities": map[string]any{"ips": true}})
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", `[{"name":"net-a","ips":["10.99.0.9","fd00:99::9/64"]}]`))
	require.NoError(t, err)
	calls := kf.Calls()
	require.Len(t, calls, 1)
	assert.JSONEq(t, `{"ips":["10.99.0.9","fd00:99::9/64"]}`, string(calls[0].RuntimeConfig))
}

// TestNPWGIgnoredIPAMClaimWarnsThePod: the pod attaches without its IPAM
// claim, and the sink hears of it once, for that attachment; an extension
// key is only logged. A hot-plug warns of the networks it adds only.
func TestNPWGIgnoredIPAMClaimWarnsThePod(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", `[{"name":"net-a","org.example.tier":"gold"},{"name":"net-b","ipam-claim-reference":"vm1.net-b"}]`)
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-b net2"}, kf.Cmds())
	for _, c := range kf.Calls() {
		assert.Empty(t, c.RuntimeConfig, "the claim reaches no plugin")
	}
	_, failures := kf.Sink.Snapshot()
	assert.Empty(t, failures)
	notes := kf.Sink.Notes()
	require.Len(t, notes, 1, "the IPAM claim only: the extension key is logged")
	assert.Equal(t, attach.PodNote{Namespace: "ns1", Name: "pod-sb1", UID: "uid-sb1", SandboxID: "sb1", Note: notes[0].Note}, notes[0])
	assert.Equal(t, "ns1/net-b", notes[0].Note.Network)
	assert.Equal(t, "net2", notes[0].Note.IfName)
	assert.Equal(t, plan.KeyIPAMClaimReference, notes[0].Note.Key)
	assert.Contains(t, notes[0].Note.Message, `the IPAM claim "vm1.net-b" ("ipam-claim-reference") was not used`)

	// Hot-plug adds a third network with a claim: only its note is new.
	_, err = replug(kf, sb, `[{"name":"net-a"},{"name":"net-b","ipam-claim-reference":"vm1.net-b"},
		{"name":"net-a","interface":"extra","ipam-claim-reference":"vm1.extra"}]`)
	require.NoError(t, err)
	notes = kf.Sink.Notes()
	require.Len(t, notes, 2)
	assert.Equal(t, "extra", notes[1].Note.IfName)
	assert.Contains(t, notes[1].Note.Message, `"vm1.extra"`)
}

// TestNPWGStatusCarriesMTUAndGateway: each entry has the result's MTU and
// the gateways of the pod's default routes through it: the result's, but
// where a default-route moved a family's default route, only that one.
func TestNPWGStatusCarriesMTUAndGateway(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", map[string]any{"mtu": 9000, "gateway": "10.99.0.1",
		"routes": []map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00:99::1"}, {"dst": "10.0.0.0/8", "gw": "10.99.0.2"}}})
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-b"}, "cni-b", map[string]any{"mtu": 1400,
		"routes": []map[string]string{{"dst": "0.0.0.0/0", "gw": "10.99.0.254"}}})
	recordRoutes(kf, nil)

	// Without a default-route: the results' default routes.
	rec, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", `net-a,net-b`))
	require.NoError(t, err)
	assert.Equal(t, 9000, rec.Networks[0].MTU, "recorded")
	assert.Equal(t, []string{"10.99.0.1", "fd00:99::1"}, rec.Networks[0].ResultGateways, "a route without gw goes via the address's gateway")
	status, _ := kf.Sink.Snapshot()
	require.Len(t, status, 1)
	a, b := status[0].Networks[1], status[0].Networks[2]
	assert.Equal(t, 9000, a.MTU)
	assert.Equal(t, []string{"10.99.0.1", "fd00:99::1"}, a.Gateway)
	assert.Equal(t, 1400, b.MTU)
	assert.Equal(t, []string{"10.99.0.254"}, b.Gateway)
	assert.Nil(t, status[0].Networks[0].Gateway, "the runtime's network: nri-cni does not know its routes")

	// net-b's default-route took IPv4: net-a lists its IPv6 route only.
	_, err = kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb2", `[{"name":"net-a"},{"name":"net-b","default-route":["10.99.0.77"]}]`))
	require.NoError(t, err)
	status, _ = kf.Sink.Snapshot()
	require.Len(t, status, 2)
	a, b = status[1].Networks[1], status[1].Networks[2]
	assert.Equal(t, []string{"fd00:99::1"}, a.Gateway)
	assert.Equal(t, []string{"10.99.0.77"}, b.Gateway)
	assert.Equal(t, []string{"10.99.0.77"}, b.Gateways, "and its default-route")
}
