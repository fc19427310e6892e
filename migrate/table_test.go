package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteTable(t *testing.T) {
	in := fixture(t, nriConf)
	in.Listed, in.Finished = 12, 2
	in.Pods = []Pod{
		pod("team-a", "web", "storage, data@eth1"),
		pod("team-a", "routes", `[{"name":"storage"},{"name":"data","default-route":[]}]`),
		pod("team-a", "vm", `[{"name":"storage","ipam-claim-reference":"vm-a.net"}]`),
		pod("team-a", "missing", "nope"),
		pod("team-a", "cross", "team-b/private"),
	}
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, rep.WriteTable(&b))
	t.Logf("\n%s", b.String())
	want := `NAMESPACE  POD      NRI-CNI  VS MULTUS              NETWORKS                               REASON               DETAIL
team-a     cross    refuse   differs                -                                      namespace-isolation  k8s.v1.cni.cncf.io/networks element 1 (team-b/private): NetworkAttachmentDefinition namespace not allowed: pods of namespace "team-a" may use their own namespace's NetworkAttachmentDefinitions and those of kubernetes.sharedNamespaces [netdefs]
team-a     missing  refuse   fails-with-multus-too  -                                      no-such-nad          k8s.v1.cni.cncf.io/networks element 1 (team-a/nope): NetworkAttachmentDefinition team-a/nope: no such NetworkAttachmentDefinition team-a/nope
team-a     routes   attach   differs                team-a/storage@net1, team-a/data@net2  default-route        element 2 (team-a/data): "default-route": [] removes every default route of the pod under Multus, eth0's too; nri-cni changes nothing
team-a     vm       attach   same                   team-a/storage@net1                    -                    ignored: `
	assert.Contains(t, b.String(), want)
	assert.Contains(t, b.String(), `
team-a     web      attach   same                   team-a/storage@net1, team-a/data@eth1  -                    -

5 pods ask for networks (k8s.v1.cni.cncf.io/networks), of 12 listed (2 finished, not judged)
  2 would work unchanged
  2 would differ: default-route 1, namespace-isolation 1
  1 fail with Multus too: no-such-nad 1
`)
}

func TestReportJSON(t *testing.T) {
	in := fixture(t, nriConf)
	in.Pods = []Pod{pod("team-a", "renamed", "storage, data@eth1, local"), pod("team-a", "missing", "nope")}
	in.Config.IfnamePrefix = "sec" // Multus always names them net<i>
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	out, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.JSONEq(t, `{"pods":[
	  {"namespace":"team-a","name":"missing","verdict":"refuse","multus":"fails-with-multus-too","reason":"no-such-nad",
	   "detail":"k8s.v1.cni.cncf.io/networks element 1 (team-a/nope): NetworkAttachmentDefinition team-a/nope: no such NetworkAttachmentDefinition team-a/nope"},
	  {"namespace":"team-a","name":"renamed","verdict":"attach","multus":"differs","reason":"interface-name",
	   "detail":"element 1 (team-a/storage) gets sec1, Multus names it net1; element 3 (team-a/local) gets sec3, Multus names it net3",
	   "networks":[{"nad":"team-a/storage","network":"storage","interface":"sec1","multusInterface":"net1"},
	               {"nad":"team-a/data","network":"data","interface":"eth1"},
	               {"nad":"team-a/local","network":"local","interface":"sec3","multusInterface":"net3"}]}],
	  "summary":{"pods":2,"listed":0,"finished":0,"same":0,"differs":1,"failsWithMultusToo":1,
	             "byReason":{"interface-name":1,"no-such-nad":1}},
	  "nads":{"listed":10,"refused":[
	    {"namespace":"team-a","name":"big","policyKey":"kubernetes.maxNADConfigBytes",
	     "detail":"spec.config: is 1158 bytes, more than 1024 (kubernetes.maxNADConfigBytes, allowed: 1024 bytes)"},
	    {"namespace":"team-a","name":"uplink","policyKey":"kubernetes.nadPolicy.default.types",
	     "detail":"spec.config.type: \"host-device\" is not an allowed plugin type (kubernetes.nadPolicy.default.types, allowed: bridge, host-local, tuning)"}]}}`, string(out))

	empty, err := json.Marshal(Report{Pods: []PodReport{}, Summary: Summary{ByReason: map[Reason]int{}}})
	require.NoError(t, err)
	assert.Contains(t, string(empty), `"pods":[]`, "an empty list, not null")
}
