package attach_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/reconcile"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestNPWGAttachesNADWithCapabilitiesAndCNIArgs(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	shared := kf.NAD(plan.NADRef{Namespace: "ns1", Name: "macvlan-a"}, "cni-a", map[string]any{"capabilities": map[string]any{"ips": true, "mac": true}})
	kf.NAD(plan.NADRef{Namespace: "shared", Name: "b"}, "cni-b", nil)
	before := string(shared.List.Bytes)

	sb := attachtest.NPWGPod("sb1", `[{"name":"macvlan-a","interface":"ext0","ips":["10.99.0.9/24"],"mac":"02:00:00:00:00:09",
		"cni-args":{"vlan":100,"label":"x"}}, {"name":"b","namespace":"shared"}]`)
	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)

	calls := kf.Calls()
	require.Len(t, calls, 2)
	// The unnamed second element is net2, by its position (as Multus names it).
	assert.Equal(t, []string{"ADD cni-a ext0", "ADD cni-b net2"}, kf.Cmds())
	assert.JSONEq(t, `{"ips":["10.99.0.9/24"],"mac":"02:00:00:00:00:09"}`, string(calls[0].RuntimeConfig))
	assert.Empty(t, calls[1].RuntimeConfig, "an element without capability keys sends none")

	// The record keeps the CNI name (DEL's cache key), the NAD reference
	// and the ADD's capability args (a DEL without the cache gets them).
	assert.Equal(t, []state.Network{
		{Name: "cni-a", IfName: "ext0", IPs: []string{"10.99.0.5/24"}, NAD: "ns1/macvlan-a",
			Caps: map[string]any{"ips": []string{"10.99.0.9/24"}, "mac": "02:00:00:00:00:09"}},
		{Name: "cni-b", IfName: "net2", IPs: []string{"10.99.0.5/24"}, NAD: "shared/b"},
	}, rec.Networks)

	// cni-args reached the config libcni ran and cached (DEL uses it); the
	// source's shared network was not touched.
	cached, _, err := kf.Engine.CNI().GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: "cni-a"},
		&libcni.RuntimeConf{ContainerID: "sb1", IfName: "ext0"})
	require.NoError(t, err)
	var list struct {
		Plugins []struct {
			Args map[string]any `json:"args"`
		} `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal(cached, &list))
	assert.Equal(t, map[string]any{"cni": map[string]any{"vlan": float64(100), "label": "x"}}, list.Plugins[0].Args)
	assert.Equal(t, before, string(shared.List.Bytes))
	assert.NotContains(t, string(shared.List.Plugins[0].Bytes), "args")

	// Status: the runtime's network first as the default entry (bare IPs),
	// then the NADs by reference.
	status, failures := kf.Sink.Snapshot()
	assert.Empty(t, failures)
	require.Len(t, status, 1)
	assert.Equal(t, attach.PodNetworks{Namespace: "ns1", Name: "pod-sb1", UID: "uid-sb1", SandboxID: "sb1", Networks: []attach.NetworkStatus{
		{Name: "default", Interface: "eth0", IPs: []string{"10.244.0.7", "fd00:244::7"}, Default: true},
		{Name: "ns1/macvlan-a", Interface: "ext0", IPs: []string{"10.99.0.5"}},
		{Name: "shared/b", Interface: "net2", IPs: []string{"10.99.0.5"}},
	}}, status[0])

	// A NAD deleted after the attach: DEL still runs, from libcni's cache,
	// with the ADD's runtimeConfig.
	kf.Src.Set(plan.NADRef{Namespace: "ns1", Name: "macvlan-a"}, nil)
	require.NoError(t, kf.Mgr.Detach(context.Background(), sb, true))
	calls = kf.Calls()
	require.Len(t, calls, 4)
	assert.Equal(t, []string{"DEL cni-b net2", "DEL cni-a ext0"}, kf.Cmds()[2:])
	assert.JSONEq(t, `{"ips":["10.99.0.9/24"],"mac":"02:00:00:00:00:09"}`, string(calls[3].RuntimeConfig))
}

func TestNPWGErrorsBeforeAnyCNICall(t *testing.T) {
	for _, tc := range []struct {
		name, annotation string
		tune             func(*attachtest.Fixture)
		is               error
		want             string
	}{
		{"cache not synced", "net-a", func(kf *attachtest.Fixture) { kf.Src.Unsynced = true }, plan.ErrSourceNotSynced,
			"NetworkAttachmentDefinition ns1/net-a: the NetworkAttachmentDefinition cache has not synced"},
		{"no such NAD", "net-a,missing", nil, plan.ErrNoSuchNAD, "element 2 (ns1/missing)"},
		{"other namespace", "other/net-a", nil, plan.ErrNamespaceNotAllowed, `element 1 (other/net-a): NetworkAttachmentDefinition namespace not allowed: pods of namespace "ns1"`},
		{"capability not granted", `[{"name":"net-a","mac":"02:00:00:00:00:01"}]`,
			func(kf *attachtest.Fixture) {
				kf.Reconfigure(func(c *config.Config) { c.PodCapabilities = []string{"bandwidth"} })
			}, plan.ErrCapabilityNotAllowed, `element 1 (ns1/net-a) key "mac" needs capability "mac"`},
		{"capability not declared", `[{"name":"net-a","ips":["10.1.1.1/24"]}]`, nil, plan.ErrCapabilityNotDeclared,
			`"ips" (key "ips") by network "cni-a"`},
		{"unsupported key", `[{"name":"net-a","infiniband-guid":"c2:11"}]`, nil, plan.ErrUnsupportedField, `"infiniband-guid"`},
		{"bad default-route", `[{"name":"net-a","default-route":["gw"]}]`, nil, plan.ErrBadAnnotation, `"default-route": "gw" is not an IP address`},
		{"cni-args conflict", `[{"name":"fixed","cni-args":{"owner":"pod"}}]`, nil, cni.ErrArgsConflict, `"cni-args"`},
		{"both annotations", "net-a", func(kf *attachtest.Fixture) {}, plan.ErrBothAnnotations, plan.AnnotationNetworks},
		{"cni-args key not listed", `[{"name":"net-a","cni-args":{"secret":1}}]`, nil, plan.ErrCNIArgsNotAllowed,
			`element 1 (ns1/net-a): "cni-args" key "secret": cni-args key not allowed by podCNIArgs (allowed: vlan, label, owner)`},
		{"cni-args off", `[{"name":"net-a","cni-args":{"vlan":1}}]`,
			func(kf *attachtest.Fixture) { kf.Reconfigure(func(c *config.Config) { c.PodCNIArgs = nil }) },
			plan.ErrCNIArgsNotAllowed, "cni-args are off"},
		// host-local hands out the address a pod names in args.cni.ips: the
		// ips capability, whatever podCNIArgs says.
		{"cni-args ips without the capability", `[{"name":"net-a","cni-args":{"ips":["10.99.0.7"]}}]`,
			func(kf *attachtest.Fixture) {
				kf.Reconfigure(func(c *config.Config) { c.PodCNIArgs, c.PodCapabilities = []string{"ips"}, []string{"bandwidth"} })
			}, plan.ErrCapabilityNotAllowed, `"cni-args" key "ips" needs capability "ips"`},
		{"cni-args mac without the capability", `[{"name":"net-a","cni-args":{"mac":"02:00:00:00:00:07"}}]`,
			func(kf *attachtest.Fixture) {
				kf.Reconfigure(func(c *config.Config) { c.PodCNIArgs, c.PodCapabilities = []string{"mac"}, []string{"ips"} })
			}, plan.ErrCapabilityNotAllowed, `"cni-args" key "mac" needs capability "mac"`},
		{"cni-args sysctl outside net", `[{"name":"net-a","cni-args":{"sysctl":{"kernel.panic":"1"}}}]`,
			func(kf *attachtest.Fixture) {
				kf.Reconfigure(func(c *config.Config) { c.PodCNIArgs = []string{"sysctl"} })
			},
			plan.ErrBadAnnotation, `sysctl "kernel.panic": only net.* sysctls`},
		{"cni-args ips not addresses", `[{"name":"net-a","cni-args":{"ips":"10.0.0.1"}}]`,
			func(kf *attachtest.Fixture) {
				kf.Reconfigure(func(c *config.Config) { c.PodCNIArgs = []string{"ips"} })
			},
			plan.ErrBadAnnotation, "want a non-empty list of IP addresses"},
		{"too many networks (JSON)", `[` + strings.Repeat(`{"name":"net-a"},`, 32) + `{"name":"net-a"}]`, nil, plan.ErrLimit,
			"annotation k8s.v1.cni.cncf.io/networks: 33 networks, more than limits.maxNetworksPerPod in nri.conf allows (32)"},
		{"too many networks (list)", strings.Repeat("net-a,", 3000) + "net-a", func(kf *attachtest.Fixture) {
			kf.Reconfigure(func(c *config.Config) { c.Limits.MaxAnnotationBytes = 256 << 10 })
		}, plan.ErrLimit, "3001 networks, more than limits.maxNetworksPerPod"},
		{"annotation too big", strings.Repeat("net-a,", 3000) + "net-a", nil, plan.ErrLimit,
			"annotation k8s.v1.cni.cncf.io/networks: 18005 bytes, more than limits.maxAnnotationBytes in nri.conf allows (16384)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kf := attachtest.NewKube(t, nil)
			kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
			kf.NAD(plan.NADRef{Namespace: "other", Name: "net-a"}, "cni-a", nil)
			kf.NAD(plan.NADRef{Namespace: "ns1", Name: "fixed"}, "cni-f", map[string]any{"args": map[string]any{"cni": map[string]any{"owner": "admin"}}})
			sb := attachtest.NPWGPod("sb1", tc.annotation)
			if tc.name == "both annotations" {
				sb.Annotations[plan.AnnotationNetworks] = "alpha"
			}
			if tc.tune != nil {
				tc.tune(kf)
			}
			_, err := kf.Mgr.Attach(context.Background(), sb)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "pod ns1/pod-sb1")
			assert.Empty(t, kf.Calls(), "no CNI call")
			_, gerr := kf.Store.Get("sb1")
			assert.ErrorIs(t, gerr, state.ErrNotFound, "no record")
			_, failures := kf.Sink.Snapshot()
			require.Len(t, failures, 1, "a failed attach is reported for a Warning Event")
			assert.Equal(t, "uid-sb1", failures[0].UID)
			assert.ErrorIs(t, failures[0].Err, tc.is)
		})
	}
}

func TestNPWGSharedNamespaceAndEmptyConfig(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	// An empty spec.config: the confDir network of the NAD's name.
	kf.Src.Set(plan.NADRef{Namespace: "shared", Name: "alpha"}, &cni.Network{Name: "alpha"})
	rec, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "shared/alpha@data0"))
	require.NoError(t, err)
	assert.Equal(t, []string{"ADD alpha data0"}, kf.Cmds())
	assert.Equal(t, "shared/alpha", rec.Networks[0].NAD)

	kf.Src.Set(plan.NADRef{Namespace: "shared", Name: "nope"}, &cni.Network{Name: "nope"})
	_, err = kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb2", "shared/nope"))
	assert.ErrorIs(t, err, cni.ErrUnknownNetwork)
	assert.Contains(t, err.Error(), "empty spec.config")
}

func TestNPWGFailedADDNamesNetworkAndPluginAndRollsBack(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "ok"}, "cni-ok", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "broken"}, "cni-broken", map[string]any{"failOn": "ADD", "failMsg": "no vlan 7"})
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "ok,broken"))
	require.Error(t, err)
	// The failed network is DELed too: libcni cached nothing for it, so the
	// DEL uses the NAD's config.
	assert.Equal(t, []string{"ADD cni-ok net1", "ADD cni-broken net2", "DEL cni-broken net2", "DEL cni-ok net1"}, kf.Cmds())
	_, failures := kf.Sink.Snapshot()
	require.Len(t, failures, 1)
	assert.Equal(t, "ns1/broken", failures[0].Network)
	assert.Contains(t, failures[0].Err.Error(), `plugin type="cni-recorder"`)
	assert.Contains(t, failures[0].Err.Error(), "no vlan 7")
}

func TestNPWGOffMeansTodaysBehaviour(t *testing.T) {
	for name, opts := range map[string]func(kf *attachtest.Fixture) *attach.Manager{
		"no source": func(kf *attachtest.Fixture) *attach.Manager {
			return attach.New(kf.Cfg, attach.Deps{Engine: kf.Engine, Netns: kf.Netns, Store: kf.Store})
		},
		"npwgAnnotation off": func(kf *attachtest.Fixture) *attach.Manager {
			cfg := kf.Cfg
			cfg.Kubernetes = &config.KubernetesConfig{}
			return attach.New(cfg, attach.Deps{Engine: kf.Engine, Netns: kf.Netns, Store: kf.Store, NADs: kf.Src})
		},
	} {
		t.Run(name, func(t *testing.T) {
			kf := attachtest.NewKube(t, nil)
			kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
			mgr := opts(kf)
			// The NPWG annotation is not nri-cni's: with requireAnnotation
			// the pod gets nothing (Multus may be serving it).
			rec, err := mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "net-a"))
			require.NoError(t, err)
			assert.Nil(t, rec)
			// nri-cni's own annotation works as before, both present or not.
			sb := attachtest.NPWGPod("sb2", "net-a")
			sb.Annotations[plan.AnnotationNetworks] = "alpha"
			rec, err = mgr.Attach(context.Background(), sb)
			require.NoError(t, err)
			require.NotNil(t, rec)
			assert.Equal(t, []string{"ADD alpha net1"}, kf.Cmds())
			assert.Zero(t, kf.Src.Lookups)
		})
	}
}

func TestResyncReportsStatusOfAttachedPods(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	other := attachtest.NPWGPod("sb2", "")
	other.Annotations = nil

	reconcile.NewResyncer(kf.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{sb, other}, reconcile.SyncOptions{})
	status, _ := kf.Sink.Snapshot()
	require.Len(t, status, 2, "once after the attach, once after the resync; nothing for a pod without networks")
	assert.Equal(t, status[0], status[1])
}

// A status the writer confirmed (Manager.StatusWritten) is not reported
// again by a resync while it would be the same: a restart does not rewrite
// every running pod's network-status. One not confirmed, or confirmed with
// other content, is; so is a confirmed pod's claims' status.
func TestResyncSkipsStatusConfirmedWritten(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	confirmed, unconfirmed, stale := attachtest.NPWGPod("sb1", "net-a"), attachtest.NPWGPod("sb2", "net-a"), attachtest.NPWGPod("sb3", "net-a")
	unconfirmed.Pod.UID, stale.Pod.UID = "uid-sb2", "uid-sb3"
	claimed := attachtest.NPWGPod("sb4", "")
	claimed.Pod.UID = "uid-sb4"
	kf.Claim(claimed, "claim-1", map[string]string{"alpha": ""})
	for _, sb := range []attach.Sandbox{confirmed, unconfirmed, stale, claimed} {
		_, err := kf.Mgr.Attach(context.Background(), sb)
		require.NoError(t, err)
	}
	attached, _ := kf.Sink.Snapshot()
	require.Len(t, attached, 4)
	kf.Mgr.StatusWritten(attached[0])
	changed := attached[2]
	changed.Networks = append([]attach.NetworkStatus(nil), changed.Networks...)
	changed.Networks[0].IPs = []string{"10.9.9.9"}
	kf.Mgr.StatusWritten(changed)
	kf.Mgr.StatusWritten(attached[3])
	other := attached[1]
	other.UID = "uid-someone-else"
	kf.Mgr.StatusWritten(other)

	reconcile.NewResyncer(kf.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{confirmed, unconfirmed, stale, claimed}, reconcile.SyncOptions{})
	status, _ := kf.Sink.Snapshot()
	var again []string
	for _, pn := range status[4:] {
		again = append(again, fmt.Sprintf("%s confirmed=%t", pn.SandboxID, pn.Confirmed))
	}
	assert.Equal(t, []string{"sb2 confirmed=false", "sb3 confirmed=false", "sb4 confirmed=true"}, again,
		"sb1 is written as it is; sb2's confirmation named another pod; sb3's other content; sb4's claims are written still")
}

func TestStatusSkipsPodsWithoutUID(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	sb := attachtest.NPWGPod("sb1", "net-a")
	sb.Pod.UID = ""
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	status, _ := kf.Sink.Snapshot()
	assert.Empty(t, status, "the status patch is guarded by the UID: without one, nothing to write")
}

func TestNPWGInterfaceNamesAndDuplicates(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "a"}, "cni-a", nil)
	rec, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "a,a@eth7,a"))
	require.NoError(t, err)
	var got []string
	for _, n := range rec.Networks {
		got = append(got, n.IfName)
	}
	assert.Equal(t, []string{"net1", "eth7", "net3"}, got, "unnamed elements named by their position, as Multus does")

	_, err = kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb2", "a@x1,a@x1"))
	assert.ErrorIs(t, err, plan.ErrBadAnnotation)
	assert.ErrorIs(t, err, plan.ErrBadInterface)
	assert.Contains(t, err.Error(), fmt.Sprintf("%s element 2 (ns1/a): interface name refused: \"x1\" is also element 1's", plan.AnnotationNPWGNetworks))

	// Multus would name both net1 and fail the second ADD: refused before any.
	_, err = kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb3", "a,a@net1"))
	assert.ErrorIs(t, err, plan.ErrBadInterface)
	assert.Empty(t, kf.Cmds()[3:], "no ADD for a refused pod")
}

func TestStaticPodsAreReportedAsStatic(t *testing.T) {
	// The kubelet marks pods that did not come from the API server with
	// kubernetes.io/config.source; their status goes to the mirror pod.
	for _, c := range []struct {
		source string // "" = no annotation
		static bool
	}{{"", false}, {"api", false}, {"file", true}, {"http", true}} {
		t.Run("source="+c.source, func(t *testing.T) {
			kf := attachtest.NewKube(t, nil)
			kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
			sb := attachtest.NPWGPod("sb1", "net-a")
			if c.source != "" {
				sb.Annotations["kubernetes.io/config.source"] = c.source
			}
			_, err := kf.Mgr.Attach(context.Background(), sb)
			require.NoError(t, err)
			status, _ := kf.Sink.Snapshot()
			require.Len(t, status, 1)
			assert.Equal(t, c.static, status[0].Static)
			assert.Equal(t, sb.Pod.UID, status[0].UID, "the static pod's own UID (the mirror names it)")
		})
	}
}

func TestNPWGDefersToMultusAsThePrimaryNetwork(t *testing.T) {
	// Where Multus is the runtime's primary network it has attached the
	// NPWG networks before nri-cni sees the pod: nri-cni attaches none of
	// them and writes no network-status (Multus's); its own annotation
	// still works.
	kf := attachtest.NewKube(t, nil)
	primary := "/etc/cni/net.d/00-multus.conf"
	kf.Multus = func() string { return primary }
	kf.Reconfigure(func(*config.Config) {})
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)

	rec, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "net-a"))
	require.NoError(t, err)
	assert.Nil(t, rec, "nothing attached")
	assert.Empty(t, kf.Cmds())

	both := attachtest.NPWGPod("sb2", "net-a")
	both.Annotations[plan.AnnotationNetworks] = "alpha"
	rec, err = kf.Mgr.Attach(context.Background(), both)
	require.NoError(t, err, "not plan.ErrBothAnnotations: the NPWG one is Multus's")
	require.NotNil(t, rec)
	assert.Equal(t, []string{"ADD alpha net1"}, kf.Cmds())
	status, _ := kf.Sink.Snapshot()
	assert.Empty(t, status, "network-status is Multus's")
	assert.Zero(t, kf.Src.Lookups, "no NAD looked up")

	// Multus removed from the node: nri-cni takes the annotation again.
	primary = ""
	rec, err = kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb3", "net-a"))
	require.NoError(t, err)
	require.NotNil(t, rec)
	status, _ = kf.Sink.Snapshot()
	assert.Len(t, status, 1)
}

// routeCall is one call of the Manager's default-route seam.
type routeCall struct {
	path, ifname string
	gateways     []string
}

func recordRoutes(kf *attachtest.Fixture, fail error) *[]routeCall {
	var calls []routeCall
	kf.Routes = func(path, ifname string, gws []net.IP) error {
		c := routeCall{path: path, ifname: ifname}
		for _, g := range gws {
			c.gateways = append(c.gateways, g.String())
		}
		calls = append(calls, c)
		return fail
	}
	kf.Reconfigure(func(*config.Config) {})
	return &calls
}

func TestNPWGDefaultRoute(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-b"}, "cni-b", nil)
	calls := recordRoutes(kf, nil)
	sb := attachtest.NPWGPod("sb1", `[{"name":"net-a"},{"name":"net-b","interface":"wan","default-route":["10.1.0.1","fd01::1"]}]`)
	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.NotNil(t, rec)
	assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-b wan"}, kf.Cmds())
	require.Len(t, *calls, 1, "once, after every ADD")
	assert.Equal(t, routeCall{path: rec.Netns, ifname: "wan", gateways: []string{"10.1.0.1", "fd01::1"}}, (*calls)[0])
	assert.Empty(t, rec.Networks[0].Gateways)
	assert.Equal(t, []string{"10.1.0.1", "fd01::1"}, rec.Networks[1].Gateways, "recorded")
	status, _ := kf.Sink.Snapshot()
	require.Len(t, status, 1)
	assert.Equal(t, []string{"10.1.0.1", "fd01::1"}, status[0].Networks[2].Gateways, "in network-status")
	assert.True(t, status[0].Networks[0].Default, "entry 0 stays the default network")
}

func TestNPWGDefaultRouteFailureRollsBack(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	recordRoutes(kf, fmt.Errorf("setting the default route via 192.0.2.1 dev net1: network is unreachable"))
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", `[{"name":"net-a","default-route":["192.0.2.1"]}]`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"default-route"`)
	assert.Contains(t, err.Error(), "network is unreachable")
	assert.Equal(t, []string{"ADD cni-a net1", "DEL cni-a net1"}, kf.Cmds(), "the ADD rolled back")
	_, getErr := kf.Store.Get("sb1")
	assert.ErrorIs(t, getErr, state.ErrNotFound, "no record left")
}

// The rollback of a NAD network's failed ADD (no libcni cache entry) DELs
// with the config the ADD ran: the element's cni-args in it, not the NAD
// as loaded (which the DEL fell back to before).
func TestRollbackOfAFailedADDRunsItsConfig(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "fails"}, "cni-fails", map[string]any{"failOn": "ADD"})
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", `[{"name":"fails","cni-args":{"label":"x"}}]`))
	require.Error(t, err)
	testenv.Eventually(t, 10*time.Second, "the rollback to finish", func() bool {
		_, err := kf.Store.Get("sb1")
		return errors.Is(err, state.ErrNotFound)
	})
	calls := kf.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, []string{"ADD", "DEL"}, []string{calls[0].Cmd, calls[1].Cmd})
	assert.Contains(t, string(calls[0].ConfArgs), `"label":"x"`, "the ADD ran the element's cni-args")
	assert.Contains(t, string(calls[1].ConfArgs), `"label":"x"`, "and so did its rollback DEL")
}
