package migrate

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/nadpolicy"
)

// The NADs the policy refuses are listed with the policy key the node's
// error names (nadpolicy's Violation, the code the admission policy is
// generated from): never a second evaluator. Empty configs, allowed ones
// and one libcni cannot parse (the policy allows it) are not listed.
func TestCheckListsRefusedNADs(t *testing.T) {
	in := fixture(t, nriConf)
	in.NADs = append(in.NADs,
		NAD{Namespace: "team-b", Name: "dhcp", Config: `{"cniVersion":"1.0.0","name":"d","type":"bridge","bridge":"nad-d","ipam":{"type":"dhcp"}}`},
		NAD{Namespace: "team-b", Name: "wide", Config: `{"cniVersion":"1.0.0","name":"w","type":"bridge","bridge":"nad-w","ipam":{"type":"host-local","subnet":"10.0.0.0/8"}}`},
		NAD{Namespace: "telco", Name: "uplink", Config: `{"cniVersion":"1.0.0","name":"u","type":"macvlan","master":"eth0"}`})
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	assert.True(t, rep.OK(), "no pod differs: refused NADs are reported apart")
	assert.Equal(t, 13, rep.NADs.Listed)

	type row struct{ ns, name, key string }
	var got []row
	for _, n := range rep.NADs.Refused {
		got = append(got, row{n.Namespace, n.Name, n.PolicyKey})
	}
	assert.Equal(t, []row{
		{"team-a", "big", "kubernetes.maxNADConfigBytes"},
		{"team-a", "uplink", "kubernetes.nadPolicy.default.types"},
		{"team-b", "dhcp", "kubernetes.nadPolicy.default.types"},
		{"team-b", "wide", "kubernetes.nadPolicy.default.ipamRanges"},
		{"telco", "uplink", "kubernetes.nadPolicy.namespaces.telco.types"},
	}, got)

	// Each verdict is nadpolicy's, word for word.
	policy, err := nadpolicy.New(in.Config.Kubernetes.NADPolicyOrDefault())
	require.NoError(t, err)
	byName := map[string]NAD{}
	for _, n := range in.NADs {
		byName[n.Namespace+"/"+n.Name] = n
	}
	for _, r := range rep.NADs.Refused {
		raw := []byte(byName[r.Namespace+"/"+r.Name].Config)
		nodeErr := nadpolicy.CheckSize(raw, in.Config.Kubernetes.NADConfigLimit())
		if nodeErr == nil {
			nodeErr = policy.Check(r.Namespace, raw)
		}
		var v *nadpolicy.Violation
		require.True(t, errors.As(nodeErr, &v), "%s/%s", r.Namespace, r.Name)
		assert.Equal(t, v.PolicyKey, r.PolicyKey)
		assert.Equal(t, v.Error(), r.Detail)
	}

	// One namespace: its NADs only.
	in.Namespace = "telco"
	rep, err = Check(context.Background(), in)
	require.NoError(t, err)
	assert.Equal(t, 2, rep.NADs.Listed)
	require.Len(t, rep.NADs.Refused, 1)
	assert.Equal(t, "uplink", rep.NADs.Refused[0].Name)
}

func TestWriteTableRefusedNADs(t *testing.T) {
	in := fixture(t, nriConf)
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, rep.WriteTable(&b))
	t.Logf("\n%s", b.String())
	assert.Contains(t, b.String(), `
NetworkAttachmentDefinitions kubernetes.nadPolicy refuses (nodes running nri-cni do not attach them; nri-cni-nad-policy warns about writing them, or refuses in deny mode):
NAMESPACE  NAD     POLICY KEY                          DETAIL
team-a     big     kubernetes.maxNADConfigBytes        spec.config: is 1158 bytes, more than 1024 (kubernetes.maxNADConfigBytes, allowed: 1024 bytes)
team-a     uplink  kubernetes.nadPolicy.default.types  spec.config.type: "host-device" is not an allowed plugin type (kubernetes.nadPolicy.default.types, allowed: bridge, host-local, tuning)

2 of 10 NetworkAttachmentDefinitions refused by kubernetes.nadPolicy: kubernetes.maxNADConfigBytes 1, kubernetes.nadPolicy.default.types 1
`)

	in.Namespace = "netdefs"
	rep, err = Check(context.Background(), in)
	require.NoError(t, err)
	b.Reset()
	require.NoError(t, rep.WriteTable(&b))
	assert.NotContains(t, b.String(), "POLICY KEY")
	assert.Contains(t, b.String(), "\n0 of 1 NetworkAttachmentDefinitions refused by kubernetes.nadPolicy\n")
}
