package migrate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/plan"
)

// TestCheckDefaultNetworks: Multus's default-network annotation (another
// eth0) always differs, and is judged on pods without the NPWG annotation
// too; nri.conf's defaultNetworks are compared as Multus's own
// defaultNetworks (delegates 1…K, the annotation's elements after them).
func TestCheckDefaultNetworks(t *testing.T) {
	const defaults = "defaultNetworks: [local, netdefs/shared]\n"
	eth0 := func(p Pod) Pod {
		p.Annotations[plan.AnnotationMultusDefaultNetwork] = "kube-system/calico"
		return p
	}
	only := func(ns string) Pod {
		return Pod{Namespace: ns, Name: "p", Annotations: map[string]string{plan.AnnotationMultusDefaultNetwork: "kube-system/calico"}}
	}
	type want struct {
		verdict  Verdict
		multus   Comparison
		reason   Reason
		networks string
		detail   []string
	}
	for _, tc := range []struct {
		name, conf string
		pod        Pod
		want       want
	}{
		{"another eth0, nothing else asked: the pod starts on the cluster network", nriConf, only("team-a"),
			want{Ignore, Differs, ReasonDefaultNetwork, "", []string{`v1.multus-cni.io/default-network="kube-system/calico"`,
				"nri-cni never replaces eth0", "starts on the cluster network", plan.SkipNotRequested}}},
		{"another eth0 beside the NPWG annotation: refused", nriConf, eth0(pod("team-a", "p", "storage")),
			want{Refuse, Differs, ReasonDefaultNetwork, "", []string{"v1.multus-cni.io/default-network", "refused",
				"nri-cni never replaces the pod's default network (eth0)"}}},
		{"another eth0 where every pod gets nri.conf's networks: refused", "kubernetes: {npwgAnnotation: true}\n", only("team-a"),
			want{Refuse, Differs, ReasonDefaultNetwork, "", []string{"refused"}}},
		{"another eth0, NPWG off: still the eth0 difference", "kubernetes: {}\n", only("team-a"),
			want{Refuse, Differs, ReasonDefaultNetwork, "", []string{"refused"}}},
		{"another eth0 in a filtered namespace", nriConf, only("excluded"),
			want{Ignore, Differs, ReasonDefaultNetwork, "", []string{`namespace "excluded" is filtered out`}}},
		{"another eth0 on a host-network pod: neither touches it", nriConf,
			Pod{Namespace: "team-a", Name: "p", HostNetwork: true, Annotations: only("team-a").Annotations},
			want{Ignore, Same, ReasonHostNetwork, "", nil}},
		{"default networks first, the elements numbered after them", nriConf + defaults, pod("team-a", "p", "storage@eth1, data"),
			want{Attach, Same, "", "local@net1, netdefs/shared@net2, team-a/storage@eth1, team-a/data@net4", nil}},
		{"default networks, an empty annotation", nriConf + defaults, pod("team-a", "p", ""),
			want{Attach, Same, "", "local@net1, netdefs/shared@net2", nil}},
		{"default networks named with another prefix", nriConf + defaults + "ifnamePrefix: sec\n", pod("team-a", "p", "storage"),
			want{Attach, Differs, ReasonInterfaceName, "local@sec1 (Multus: net1), netdefs/shared@sec2 (Multus: net2), team-a/storage@sec3 (Multus: net3)",
				[]string{"default network 1 (local) gets sec1, Multus names it net1", "element 1 (team-a/storage) gets sec3"}}},
		{"default networks and an empty default-route: the element counted in the annotation", nriConf + defaults,
			pod("team-a", "p", `[{"name":"storage"},{"name":"data","default-route":[]}]`),
			want{Attach, Differs, ReasonDefaultRoute, "local@net1, netdefs/shared@net2, team-a/storage@net3, team-a/data@net4",
				[]string{`element 2 (team-a/data): "default-route": []`}}},
		{"default networks count against the limit", nriConf + defaults, pod("team-a", "p", "storage, data, storage"),
			want{Refuse, Differs, ReasonLimits, "", []string{"and the 2 defaultNetworks of nri.conf: 5 networks"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t, tc.conf)
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

// TestCheckCountsDefaultNetworkPods: pods with only Multus's
// default-network annotation are judged and counted; pods with neither
// annotation are not.
func TestCheckCountsDefaultNetworkPods(t *testing.T) {
	in := fixture(t, nriConf)
	in.Pods = []Pod{
		pod("team-a", "web", "storage"),
		{Namespace: "team-a", Name: "calico", Annotations: map[string]string{plan.AnnotationMultusDefaultNetwork: "calico"}},
		{Namespace: "team-a", Name: "plain", Annotations: map[string]string{"other": "x"}},
	}
	rep, err := Check(context.Background(), in)
	require.NoError(t, err)
	require.Len(t, rep.Pods, 2)
	assert.Equal(t, "calico", rep.Pods[0].Name)
	assert.Equal(t, Summary{Pods: 2, Same: 1, Differs: 1, ByReason: map[Reason]int{ReasonDefaultNetwork: 1}}, rep.Summary)
	assert.False(t, rep.OK())
}
