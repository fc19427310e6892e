package dra

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// Issue 28, item 8: the DeviceClass's config wins over the claim's only if
// tenants cannot pick another class. With kubernetes.dra.deviceClasses the
// node prepares a request only through a class its namespace may use: the
// base class nri-cni.io (every device, no config) is refused to tenants,
// the admin's pinned class is not, a listed namespace gets its own list.
func TestPrepareChecksTheClass(t *testing.T) {
	rule := &config.DeviceClassRule{Default: []string{"team-net"},
		Namespaces: map[string][]string{"net-admins": {DriverName, "team-net"}, "locked": {}}}
	exactly := func(class string) []resourceapi.DeviceRequest {
		return []resourceapi.DeviceRequest{{Name: "a", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}
	}
	for _, tc := range []struct {
		name     string
		rule     *config.DeviceClassRule
		ns       string
		requests []resourceapi.DeviceRequest
		request  string // the allocation's request ("a" unless set)
		msg      string // "" = prepared
	}{
		{name: "no rule: any class", ns: "team", requests: exactly(DriverName)},
		{name: "no rule, no spec", ns: "team"},
		{name: "the base class refused to a tenant", rule: rule, ns: "team", requests: exactly(DriverName),
			msg: `ResourceClaim team/net request "a" (device ` + "%DEV%" + `): DeviceClass not allowed: DeviceClass "nri-cni.io" is not one ` +
				`namespace team may use (kubernetes.dra.deviceClasses.default: team-net)`},
		{name: "the pinned class", rule: rule, ns: "team", requests: exactly("team-net")},
		{name: "the network team's namespace", rule: rule, ns: "net-admins", requests: exactly(DriverName)},
		{name: "a namespace allowed none", rule: rule, ns: "locked", requests: exactly("team-net"),
			msg: "(kubernetes.dra.deviceClasses.namespaces.locked: none)"},
		{name: "firstAvailable: the subrequest's class", rule: rule, ns: "team", request: "a/fast",
			requests: []resourceapi.DeviceRequest{{Name: "a", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "slow", DeviceClassName: "team-net"}, {Name: "fast", DeviceClassName: DriverName}}}},
			msg: `DeviceClass "nri-cni.io" is not one namespace team may use`},
		{name: "firstAvailable: an allowed subrequest", rule: rule, ns: "team", request: "a/slow",
			requests: []resourceapi.DeviceRequest{{Name: "a", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "slow", DeviceClassName: "team-net"}, {Name: "fast", DeviceClassName: DriverName}}}}},
		{name: "a request the spec does not have", rule: rule, ns: "team", requests: exactly("team-net"), request: "b",
			msg: "no DeviceClass found for the request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims, err := state.OpenClaims(t.TempDir())
			require.NoError(t, err)
			d, _, _ := recordsDriver(t, claims, func(c *config.Config) { c.Kubernetes.DRA.DeviceClasses = tc.rule })
			dev := d.Published().Devices[0].Name
			req := tc.request
			if req == "" {
				req = "a"
			}
			c := claim(tc.ns, "net", map[string]string{req: dev})
			c.Spec.Devices.Requests = tc.requests
			out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
			require.NoError(t, err)
			if tc.msg == "" {
				require.NoError(t, out[c.UID].Err)
				assert.Len(t, claims.ForPod("pod-uid"), 1)
				return
			}
			require.ErrorIs(t, out[c.UID].Err, ErrClassNotAllowed)
			assert.Contains(t, out[c.UID].Err.Error(), strings.ReplaceAll(tc.msg, "%DEV%", dev))
			assert.Empty(t, claims.List(), "nothing recorded")
		})
	}
}
