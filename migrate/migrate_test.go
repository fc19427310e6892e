package migrate

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
)

// nriConf is a Kubernetes-mode nri.conf as deploy/base ships it, with a
// shared namespace, a telco namespace allowed SR-IOV, a small limit and a
// filtered namespace.
const nriConf = `
podSelection: true
requireAnnotation: true
podCapabilities: [bandwidth, mac]
namespaces: {exclude: [excluded]}
limits: {maxNetworksPerPod: 4}
kubernetes:
  npwgAnnotation: true
  sharedNamespaces: [netdefs]
  adminNamespaces: [kube-system, netdefs] # defaultNetworks names netdefs/shared
  maxNADConfigBytes: 1024
  nadPolicy:
    default:
      types: [bridge, host-local, tuning]
      bridges: ["nad-*"]
      ipamRanges: [10.251.0.0/16]
    namespaces:
      telco: {types: [sriov, host-local], ipamRanges: [10.252.0.0/16]}
`

func bridgeNAD(ns, name string, plugins ...string) NAD {
	p := `{"type":"bridge","bridge":"nad-` + name + `","ipam":{"type":"host-local","ranges":[[{"subnet":"10.251.1.0/24"}]]}}`
	for _, extra := range plugins {
		p += "," + extra
	}
	return NAD{Namespace: ns, Name: name, Config: `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[` + p + `]}`}
}

func fixture(t *testing.T, conf string) Input {
	t.Helper()
	cfg, err := config.Parse([]byte(conf))
	require.NoError(t, err)
	local, err := cni.Parse([]byte(`{"cniVersion":"1.0.0","name":"local","type":"bridge","bridge":"nri-cni0"}`))
	require.NoError(t, err)
	sriov := NAD{Namespace: "telco", Name: "vf", ResourceName: "intel.com/sriov_a",
		Config: `{"cniVersion":"1.0.0","name":"vf","type":"sriov","ipam":{"type":"host-local","subnet":"10.252.0.0/24"}}`}
	return Input{Config: cfg, Local: []*cni.Network{local}, Inventory: Inventory{NADs: []NAD{
		bridgeNAD("team-a", "storage", `{"type":"tuning","capabilities":{"mac":true}}`),
		bridgeNAD("team-a", "data"),
		bridgeNAD("netdefs", "shared"),
		bridgeNAD("team-b", "private"),
		{Namespace: "team-a", Name: "uplink", Config: `{"cniVersion":"1.0.0","name":"uplink","type":"host-device","device":"eth0"}`},
		{Namespace: "team-a", Name: "local", Config: "  "},
		{Namespace: "team-a", Name: "gone", Config: ""},
		{Namespace: "team-a", Name: "big", Config: `{"cniVersion":"1.0.0","name":"big","type":"bridge","x":"` + strings.Repeat("a", 1100) + `"}`},
		{Namespace: "team-a", Name: "broken", Config: `{"cniVersion":"1.0.0","name":"broken","plugins":[]}`},
		sriov,
	}}}
}

func pod(ns, name, networks string) Pod {
	return Pod{Namespace: ns, Name: name, Annotations: map[string]string{plan.AnnotationNPWGNetworks: networks}}
}

func withIPs(p Pod, ips ...string) Pod {
	p.IPs = ips
	return p
}

// TestCheck: pods written the Multus way, each judged by nri-cni's planner
// and compared with what Multus gives it.
func TestCheck(t *testing.T) {
	type want struct {
		verdict  Verdict
		multus   Comparison
		reason   Reason
		networks string // networkList
		detail   []string
	}
	for _, tc := range []struct {
		name string
		pod  Pod
		want want
	}{
		{"simple form", pod("team-a", "p", "storage, data@eth1"),
			want{Attach, Same, "", "team-a/storage@net1, team-a/data@eth1", nil}},
		{"simple form, numbered by position as Multus does", pod("team-a", "p", "storage, data@eth1, local"),
			want{Attach, Same, "", "team-a/storage@net1, team-a/data@eth1, team-a/local@net3", nil}},
		{"simple form, a name two elements get (Multus fails the second ADD)", pod("team-a", "p", "storage, data@net1"),
			want{Refuse, FailsBoth, ReasonBadInterface, "", []string{`"net1" is also element 1's`}}},
		{"an interface named eth0", pod("team-a", "p", "storage@eth0"),
			want{Refuse, FailsBoth, ReasonBadInterface, "", []string{`"eth0" is not a usable interface name`}}},
		{"JSON form with mac and interface", pod("team-a", "p",
			`[{"name":"storage","mac":"02:00:00:00:00:01"},{"name":"data","namespace":"team-a","interface":"eth9"}]`),
			want{Attach, Same, "", "team-a/storage@net1, team-a/data@eth9", nil}},
		{"JSON form, a named element before an unnamed one", pod("team-a", "p",
			`[{"name":"storage","interface":"data0"},{"name":"data"}]`),
			want{Attach, Same, "", "team-a/storage@data0, team-a/data@net2", nil}},
		{"keys the spec says to ignore (Multus ignores them too)", pod("team-a", "p",
			`[{"name":"storage","ipam-claim-reference":"vm-a.net","org.example.hint":true},{"name":"data"}]`),
			want{Attach, Same, "", "team-a/storage@net1, team-a/data@net2", nil}},
		{"an empty default-route: Multus removes every default route", pod("team-a", "p",
			`[{"name":"storage"},{"name":"data","default-route":[]}]`),
			want{Attach, Differs, ReasonDefaultRoute, "team-a/storage@net1, team-a/data@net2",
				[]string{`element 2 (team-a/data): "default-route": [] removes every default route`}}},
		{"a gateway of the pod's family", withIPs(pod("team-a", "p", `[{"name":"storage","default-route":["10.251.1.1"]}]`), "10.244.0.5"),
			want{Attach, Same, "", "team-a/storage@net1", nil}},
		{"dual stack, an IPv4 gateway only: Multus drops the IPv6 default route",
			withIPs(pod("team-a", "p", `[{"name":"storage","default-route":["10.251.1.1"]}]`), "10.244.0.5", "fd00:10::5"),
			want{Attach, Differs, ReasonDefaultRoute, "team-a/storage@net1",
				[]string{"no element names an IPv6 gateway: Multus removes the pod's IPv6 default routes (fd00:10::5)"}}},
		{"shared namespace", pod("team-a", "p", "netdefs/shared"), want{Attach, Same, "", "netdefs/shared@net1", nil}},
		{"empty spec.config: the confDir network", pod("team-a", "p", "local"), want{Attach, Same, "", "team-a/local@net1", nil}},
		{"device plugin resource", pod("telco", "p", "vf"),
			want{Attach, Same, "", "telco/vf@net1", nil}}, // the pod's device goes to the plugin, as with Multus
		{"cross-namespace reference", pod("team-a", "p", "team-b/private"),
			want{Refuse, Differs, ReasonNamespaceIsolation, "", []string{"element 1 (team-b/private)", "kubernetes.sharedNamespaces [netdefs]"}}},
		{"missing NAD", pod("team-a", "p", "storage, nope"),
			want{Refuse, FailsBoth, ReasonNoSuchNAD, "", []string{"element 2 (team-a/nope)", "no such NetworkAttachmentDefinition team-a/nope"}}},
		{"NAD the policy refuses", pod("team-a", "p", "uplink"),
			want{Refuse, Differs, ReasonNADPolicy, "", []string{"team-a/uplink", `"host-device"`, "kubernetes.nadPolicy.default.types"}}},
		{"NAD over maxNADConfigBytes", pod("team-a", "p", "big"),
			want{Refuse, Differs, ReasonLimits, "", []string{"team-a/big", "kubernetes.maxNADConfigBytes"}}},
		{"NAD that is no CNI config", pod("team-a", "p", "broken"),
			want{Refuse, Differs, ReasonBadNAD, "", []string{"team-a/broken"}}},
		{"empty spec.config, no confDir network", pod("team-a", "p", "gone"),
			want{Refuse, Differs, ReasonUnknownNetwork, "", []string{"team-a/gone", `"gone"`}}},
		{"too many networks", pod("team-a", "p", "storage, data, local, netdefs/shared, storage@x1"),
			want{Refuse, Differs, ReasonLimits, "", []string{"5 networks", "limits.maxNetworksPerPod", "(4)"}}},
		{"too many networks, JSON form", pod("team-a", "p", `[{"name":"a"},{"name":"b"},{"name":"c"},{"name":"d"},{"name":"e"}]`),
			want{Refuse, Differs, ReasonLimits, "", []string{"5 networks"}}},
		{"ips not allowed by podCapabilities", pod("team-a", "p", `[{"name":"storage","ips":["10.251.1.5/24"]}]`),
			want{Refuse, Differs, ReasonCapabilityNotAllowed, "", []string{`key "ips"`, "podCapabilities"}}},
		{"mac not declared by the NAD", pod("team-a", "p", `[{"name":"data","mac":"02:00:00:00:00:02"}]`),
			want{Refuse, Differs, ReasonCapabilityNotDeclared, "", []string{"team-a/data", `"mac"`}}},
		{"cni-args not allowed", pod("team-a", "p", `[{"name":"storage","cni-args":{"vlan":5}}]`),
			want{Refuse, Differs, ReasonCNIArgsNotAllowed, "", []string{`"vlan"`, "podCNIArgs"}}},
		{"unsupported key", pod("team-a", "p", `[{"name":"storage","infiniband-guid":"c2:11:22:33:44:55:66:77"}]`),
			want{Refuse, Differs, ReasonUnsupportedKey, "", []string{`"infiniband-guid"`}}},
		{"a key Multus knows and nri-cni does not", pod("team-a", "p", `[{"name":"storage","deviceID":"0000:03:00.1"}]`),
			want{Refuse, Differs, ReasonUnsupportedKey, "", []string{`key "deviceID" not supported by nri-cni`}}},
		{"interface used twice", pod("team-a", "p", "storage@x1, data@x1"),
			want{Refuse, FailsBoth, ReasonBadInterface, "", []string{`"x1" is also element 1's`}}},
		{"not JSON (Multus fails too)", pod("team-a", "p", `[{"name":"storage"`),
			want{Refuse, FailsBoth, ReasonBadAnnotation, "", []string{"not a JSON list"}}},
		{"a single JSON object (Multus fails too)", pod("team-a", "p", `{"name":"storage"}`),
			want{Refuse, FailsBoth, ReasonBadAnnotation, "", []string{"single object"}}},
		{"both annotations", Pod{Namespace: "team-a", Name: "p", Annotations: map[string]string{
			plan.AnnotationNPWGNetworks: "storage", plan.AnnotationNetworks: "local"}},
			want{Refuse, Differs, ReasonBothAnnotations, "", nil}},
		{"filtered namespace", pod("excluded", "p", "storage"),
			want{Ignore, Differs, ReasonNamespaceFiltered, "", []string{`namespace "excluded" is filtered out`}}},
		{"empty annotation", pod("team-a", "p", ""), want{Ignore, Same, ReasonOptedOut, "", []string{"opted out"}}},
		{"host network", Pod{Namespace: "team-a", Name: "p", HostNetwork: true,
			Annotations: map[string]string{plan.AnnotationNPWGNetworks: "uplink"}},
			want{Ignore, Same, ReasonHostNetwork, "", nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t, nriConf)
			in.Pods = []Pod{tc.pod}
			rep, err := Check(context.Background(), in)
			require.NoError(t, err)
			require.Len(t, rep.Pods, 1)
			got := rep.Pods[0]
			t.Logf("%s %s %s: %s", got.Verdict, got.Multus, got.Reason, got.Detail)
			assert.Equal(t, tc.want.verdict, got.Verdict)
			assert.Equal(t, tc.want.multus, got.Multus)
			assert.Equal(t, tc.want.reason, got.Reason)
			assert.Equal(t, tc.want.networks, networkList(got.Networks))
			for _, d := range tc.want.detail {
				assert.Contains(t, got.Detail, d)
			}
			assert.Equal(t, tc.want.multus != Differs, rep.OK())
		})
	}
}

// The verdict is the planner's own error, word for word: what the kubelet's
// event would say.
func TestCheckDetailIsThePlannersError(t *testing.T) {
	in := fixture(t, nriConf)
	in.Pods = []Pod{pod("team-a", "p", "team-b/private")}
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	assert.Equal(t, `k8s.v1.cni.cncf.io/networks element 1 (team-b/private): NetworkAttachmentDefinition namespace not allowed: `+
		`pods of namespace "team-a" may use their own namespace's NetworkAttachmentDefinitions and those of kubernetes.sharedNamespaces [netdefs]`,
		rep.Pods[0].Detail)
}

func TestCheckReportsIgnoredKeys(t *testing.T) {
	in := fixture(t, nriConf)
	in.Pods = []Pod{pod("team-a", "vm", `[{"name":"storage","ipam-claim-reference":"vm-a.net","org.example.hint":true}]`)}
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	got := rep.Pods[0]
	assert.Equal(t, Same, got.Multus)
	require.Len(t, got.Ignored, 2)
	assert.Contains(t, got.Ignored[0], `"vm-a.net"`)
	assert.Contains(t, got.Ignored[0], "ipam-claim-reference")
	assert.Contains(t, got.Ignored[1], `"org.example.hint"`)
	assert.True(t, rep.OK())
}

func TestCheckNPWGOff(t *testing.T) {
	for name, conf := range map[string]string{
		"no kubernetes section":            "podSelection: true\nrequireAnnotation: true\n",
		"npwgAnnotation false":             "podSelection: true\nrequireAnnotation: true\nkubernetes: {npwgAnnotation: false}\n",
		"every pod gets confDir":           "kubernetes: {}\n",
		"every pod gets a missing network": "networks: [absent]\nkubernetes: {}\n",
	} {
		t.Run(name, func(t *testing.T) {
			in := fixture(t, conf)
			in.Pods = []Pod{pod("team-a", "p", "storage")}
			rep, err := Check(context.Background(), in)
			require.NoError(t, err)
			got := rep.Pods[0]
			assert.Contains(t, []Verdict{Ignore, Refuse}, got.Verdict)
			assert.Equal(t, Differs, got.Multus)
			assert.Equal(t, ReasonNPWGOff, got.Reason)
			assert.Contains(t, got.Detail, "npwgAnnotation: true")
			assert.False(t, rep.OK())
		})
	}
}

func TestCheckSummary(t *testing.T) {
	in := fixture(t, nriConf)
	in.Listed, in.Finished = 9, 1
	in.Pods = []Pod{
		pod("team-a", "b-same", "storage"), pod("team-a", "a-same", "data"),
		pod("team-a", "policy", "uplink"), pod("team-a", "isolation", "team-b/private"),
		pod("team-a", "missing", "nope"),
		{Namespace: "team-a", Name: "no-annotation", Annotations: map[string]string{"other": "x"}},
	}
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	var names []string
	for _, p := range rep.Pods {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"a-same", "b-same", "isolation", "missing", "policy"}, names, "sorted; pods without the annotation not judged")
	assert.Equal(t, Summary{Pods: 5, Listed: 9, Finished: 1, Same: 2, Differs: 2, FailsBoth: 1,
		ByReason: map[Reason]int{ReasonNADPolicy: 1, ReasonNamespaceIsolation: 1, ReasonNoSuchNAD: 1}}, rep.Summary)
	assert.False(t, rep.OK())
}

func TestCheckStopsWithContext(t *testing.T) {
	in := fixture(t, nriConf)
	in.Pods = []Pod{pod("team-a", "p", "storage")}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Check(ctx, in)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "team-a/p")
}
