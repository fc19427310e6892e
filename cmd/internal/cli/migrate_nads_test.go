package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/migrate"
)

// A NAD kubernetes.nadPolicy refuses is listed with its policy key and makes
// the check exit 3, even when every pod is fine; -n keeps the NADs of that
// namespace only.
func TestMigrateCheckRefusedNADExitsThree(t *testing.T) {
	cluster := func() *fakeCluster { // checkConfig takes nri.conf out of the data it gets
		c := checkCluster()
		c.inv.NADs = append(c.inv.NADs,
			migrate.NAD{Namespace: "team-b", Name: "uplink", Config: `{"cniVersion":"1.0.0","name":"u","type":"macvlan","master":"eth0"}`})
		return c
	}
	code, stdout, stderr := runCheck(t, cluster(), "--from-configmap", "kube-system/nri-cni")
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Equal(t, exitDiffers, code)
	assert.Contains(t, stdout, "  2 would work unchanged\n  0 would differ\n")
	assert.Regexp(t, `(?m)^team-b +uplink +kubernetes\.nadPolicy\.default\.types +spec\.config\.type: "macvlan" is not an allowed plugin type`, stdout)
	assert.Contains(t, stdout, "1 of 3 NetworkAttachmentDefinitions refused by kubernetes.nadPolicy: kubernetes.nadPolicy.default.types 1\n")

	code, stdout, _ = runCheck(t, cluster(), "--from-configmap", "kube-system/nri-cni", "-o", "json")
	assert.Equal(t, exitDiffers, code)
	var rep migrate.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Len(t, rep.NADs.Refused, 1)
	assert.Equal(t, "kubernetes.nadPolicy.default.types", rep.NADs.Refused[0].PolicyKey)

	code, stdout, stderr = runCheck(t, cluster(), "--from-configmap", "kube-system/nri-cni", "-n", "team-a")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "0 of 2 NetworkAttachmentDefinitions refused by kubernetes.nadPolicy\n")
}
