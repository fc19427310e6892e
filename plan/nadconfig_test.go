package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
)

// TestParseNADConfig: one NAD's verdict, as every NADSource gives it.
func TestParseNADConfig(t *testing.T) {
	policy, err := nadpolicy.New(&config.NADPolicy{Default: &config.NADRule{Types: []string{"bridge"}, Bridges: []string{"nad-*"}}})
	require.NoError(t, err)
	ref := NADRef{Namespace: "team", Name: "net"}
	for _, tc := range []struct {
		name, config string
		want         string // network name, or a fragment of the error
		policyKey    string // the refusing key, for a Violation
	}{
		{"a config the policy allows", `{"cniVersion":"1.0.0","name":"br","type":"bridge","bridge":"nad-a"}`, "br", ""},
		{"empty: the confDir network of the NAD's name", " \n", "net", ""},
		{"too large, checked first", `{"x":"` + strings.Repeat("a", 1100) + `"}`, "more than 1024", config.MaxNADConfigBytesKey},
		{"refused by the policy", `{"cniVersion":"1.0.0","name":"br","type":"macvlan","master":"eth0"}`, `"macvlan"`,
			"kubernetes.nadPolicy.default.types"},
		{"not a CNI config", `{"cniVersion":"1.0.0","name":"br","plugins":[]}`, "no plugins", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ParseNADConfig(ref, tc.config, policy, 1024)
			if err == nil {
				assert.Equal(t, tc.want, n.Name)
				if strings.TrimSpace(tc.config) == "" {
					assert.Nil(t, n.List, "the confDir network: a Network with its Name only")
				} else {
					assert.Equal(t, "NetworkAttachmentDefinition team/net", n.File)
				}
				return
			}
			require.NotContains(t, []string{"br", "net"}, tc.want, "unexpected error: %v", err)
			assert.ErrorIs(t, err, ErrBadNAD)
			assert.Contains(t, err.Error(), "team/net")
			assert.Contains(t, err.Error(), tc.want)
			var v *nadpolicy.Violation
			if assert.Equal(t, tc.policyKey != "", errors.As(err, &v)) && v != nil {
				assert.Equal(t, tc.policyKey, v.PolicyKey)
			}
		})
	}
}
