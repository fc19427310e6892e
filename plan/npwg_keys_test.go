package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNPWGForeignKeys: keys pods written for Multus carry that nri-cni
// refuses fail the pod with the key and the reason, not the decoder's
// "unknown field".
func TestNPWGForeignKeys(t *testing.T) {
	for _, tc := range []struct {
		name, element string
		sentinel      error
		msg           []string
	}{
		{"Multus's deviceID", `"deviceID":"0000:18:02.5"`, ErrUnsupportedField,
			[]string{`key "deviceID" not supported by nri-cni`, "Multus's own key", "a DRA claim", "k8s.v1.cni.cncf.io/resourceName"}},
		{"deviceID in another letter case (Multus reads it too)", `"DeviceId":"0000:18:02.5"`, ErrUnsupportedField,
			[]string{`key "deviceID"`}},
		{"infiniband-guid", `"infiniband-guid":"24:8a:07:03:00:8d:ae:2f"`, ErrUnsupportedField,
			[]string{`key "infiniband-guid" not supported by nri-cni: no InfiniBand support`, "infinibandGUID capability"}},
		{"the capability's name for it", `"infinibandGUID":"24:8a:07:03:00:8d:ae:2f"`, ErrUnsupportedField,
			[]string{`key "infinibandGUID"`, "infiniband-guid"}},
		{"Multus's Go field name for ips", `"ipRequest":["10.1.1.5/24"]`, ErrBadAnnotation,
			[]string{`key "ipRequest" is not a key of the NPWG spec, write "ips"`, `Multus ignores "ipRequest"`}},
		{"macRequest", `"macRequest":"02:00:00:00:00:01"`, ErrBadAnnotation, []string{`write "mac"`}},
		{"interfaceName", `"interfaceName":"data0"`, ErrBadAnnotation, []string{`write "interface"`}},
		{"gatewayRequest", `"gatewayRequest":["10.1.1.1"]`, ErrBadAnnotation, []string{`write "default-route"`}},
		{"cniArgs", `"cniArgs":{"a":"b"}`, ErrBadAnnotation, []string{`write "cni-args"`}},
		{"portMappingsRequest", `"portMappingsRequest":[]`, ErrBadAnnotation, []string{`write "portMappings"`}},
		{"bandwidthRequest", `"bandwidthRequest":{}`, ErrBadAnnotation, []string{`write "bandwidth"`}},
		{"the first foreign key is named", `"ips":["10.1.1.5"],"macRequest":"x","deviceID":"y"`, ErrUnsupportedField,
			[]string{`key "deviceID"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNPWGNetworks(`[{"name":"net-a"},{"name":"net-b",`+tc.element+`}]`, "pods", 32)
			require.ErrorIs(t, err, tc.sentinel)
			require.ErrorIs(t, err, ErrBadAnnotation)
			assert.Contains(t, err.Error(), `k8s.v1.cni.cncf.io/networks element 2 (network "net-b")`)
			for _, m := range tc.msg {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
	// Set to null, a key is not set (Multus reads it as empty).
	got, err := ParseNPWGNetworks(`[{"name":"net-a","infiniband-guid":null}]`, "pods", 32)
	require.NoError(t, err)
	assert.Equal(t, []NetworkSelection{{Ref: NADRef{"pods", "net-a"}}}, got)
}
