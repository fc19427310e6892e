package attach_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
)

func annotated(id string, ann map[string]string) attach.Sandbox {
	sb := attachtest.Pod(id, 42)
	sb.Annotations = ann
	return sb
}

func TestPodSelection(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    []string // "ADD net ifname"
		wantErr string
	}{
		{"no annotation: defaults", nil, []string{"ADD alpha net1"}, ""},
		{"pick two with an ifname", map[string]string{plan.AnnotationNetworks: " beta, gamma@eth5 "}, []string{"ADD beta net1", "ADD gamma eth5"}, ""},
		{"auto names skip taken ones", map[string]string{plan.AnnotationNetworks: "alpha@net1, beta"}, []string{"ADD alpha net1", "ADD beta net2"}, ""},
		{"empty value opts out", map[string]string{plan.AnnotationNetworks: "  "}, nil, ""},
		{"unknown network", map[string]string{plan.AnnotationNetworks: "alpha, delta"}, nil, `entry 2: unknown network "delta"`},
		{"duplicate ifname", map[string]string{plan.AnnotationNetworks: "alpha@x1, beta@x1"}, nil, `interface "x1" used twice`},
		{"empty entry", map[string]string{plan.AnnotationNetworks: "alpha,,beta"}, nil, "entry 2 is empty"},
		{"eth0 is the runtime's", map[string]string{plan.AnnotationNetworks: "alpha@eth0"}, nil, `"eth0" is not a usable interface name`},
		{"bad ifname", map[string]string{plan.AnnotationNetworks: "alpha@this-name-is-too-long"}, nil, "not a usable interface name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha", "beta", "gamma"}, nil)
			f.Reconfigure(func(c *config.Config) { c.Networks = []string{"alpha"} })
			f.Reconfigure(func(c *config.Config) { c.PodSelection = true })
			_, err := f.Mgr.Attach(context.Background(), annotated("sb1", tc.ann))
			if tc.wantErr != "" {
				require.ErrorIs(t, err, plan.ErrBadAnnotation)
				assert.Contains(t, err.Error(), plan.AnnotationNetworks)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Contains(t, err.Error(), "ns1/pod-sb1")
				assert.Empty(t, f.Calls())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, f.Cmds())
		})
	}
}

// requireAnnotation: only pods that ask get networks (opt-in, as with
// Multus); without it an unannotated pod gets the configured networks.
func TestRequireAnnotation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		require bool
		ann     map[string]string
		want    []string
	}{
		{"opt-in: no annotation, nothing", true, nil, nil},
		{"opt-in: asks for beta", true, map[string]string{plan.AnnotationNetworks: "beta"}, []string{"ADD beta net1"}},
		{"opt-in: empty value, nothing", true, map[string]string{plan.AnnotationNetworks: ""}, nil},
		{"defaults: no annotation, configured networks", false, nil, []string{"ADD alpha net1"}},
		{"defaults: asks for beta", false, map[string]string{plan.AnnotationNetworks: "beta"}, []string{"ADD beta net1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha", "beta"}, nil)
			f.Reconfigure(func(c *config.Config) { c.Networks = []string{"alpha"} })
			f.Reconfigure(func(c *config.Config) { c.PodSelection, c.RequireAnnotation = true, tc.require })
			rec, err := f.Mgr.Attach(context.Background(), annotated("sb1", tc.ann))
			require.NoError(t, err)
			assert.Equal(t, tc.want, f.Cmds())
			assert.Equal(t, tc.want == nil, rec == nil, "a record only when something was attached")
		})
	}
}

func TestAnnotationIgnoredWithoutPodSelection(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, nil)
	f.Reconfigure(func(c *config.Config) { c.Networks = []string{"alpha"} })
	_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{plan.AnnotationNetworks: "beta"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
}

func TestNamespaceFilter(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Reconfigure(func(c *config.Config) {
		c.Namespaces = config.NamespaceFilter{Include: []string{"ns1", "kube-system"}, Exclude: []string{"kube-system"}}
	})
	for _, tc := range []struct {
		ns   string
		adds int
	}{{"ns1", 1}, {"kube-system", 0}, {"other", 0}} {
		sb := attachtest.Pod("sb-"+tc.ns, 42)
		sb.Pod.Namespace = tc.ns
		rec, err := f.Mgr.Attach(context.Background(), sb)
		require.NoError(t, err)
		assert.Equal(t, tc.adds == 0, rec == nil, tc.ns)
	}
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
}

func TestCapabilityArgsReachDeclaringPluginsOnly(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, map[string]map[string]any{
		"alpha": {"capabilities": map[string]bool{"mac": true, "bandwidth": true, "ips": true, "portMappings": true}},
	})
	allowCapabilities(f, config.KnownCapabilities()...)
	ann := map[string]string{
		plan.AnnotationMAC: "02:42:ac:11:00:02", plan.AnnotationIPs: "10.9.8.7/24",
		plan.AnnotationIngressBandwidth: "10M", plan.AnnotationEgressBandwidth: "1Gi",
		plan.AnnotationPortMappings: `[{"hostPort": 8080, "containerPort": 80}]`,
	}
	_, err := f.Mgr.Attach(context.Background(), annotated("sb1", ann))
	require.NoError(t, err)
	calls := f.Calls()
	require.Len(t, calls, 2)
	var rc struct {
		Mac       string           `json:"mac"`
		IPs       []string         `json:"ips"`
		Bandwidth map[string]int64 `json:"bandwidth"`
		Ports     []map[string]any `json:"portMappings"`
	}
	require.NoError(t, json.Unmarshal(calls[0].RuntimeConfig, &rc))
	assert.Equal(t, "02:42:ac:11:00:02", rc.Mac)
	assert.Equal(t, []string{"10.9.8.7/24"}, rc.IPs)
	assert.Equal(t, int64(10_000_000), rc.Bandwidth["ingressRate"])
	assert.Equal(t, int64(1<<30), rc.Bandwidth["egressRate"])
	assert.Equal(t, "tcp", rc.Ports[0]["protocol"])
	assert.Empty(t, calls[1].RuntimeConfig, "beta declares no capabilities")

	// DEL gets the ADD's capability args (from libcni's cache).
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	dels := f.Calls()[2:]
	require.Len(t, dels, 2)
	assert.Contains(t, string(dels[1].RuntimeConfig), "02:42:ac:11:00:02")
}

func TestBadCapabilityAnnotations(t *testing.T) {
	for key, value := range map[string]string{
		plan.AnnotationMAC:              "01:00:5e:00:00:01",
		plan.AnnotationIPs:              "10.1.2.3",
		plan.AnnotationIngressBandwidth: "fast",
		plan.AnnotationEgressBandwidth:  "10",
		plan.AnnotationPortMappings:     `[{"hostPort": 0, "containerPort": 80}]`,
	} {
		t.Run(key, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, nil)
			allowCapabilities(f, config.KnownCapabilities()...)
			_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{key: value}))
			require.ErrorIs(t, err, plan.ErrBadAnnotation)
			assert.Contains(t, err.Error(), key)
			assert.Empty(t, f.Calls())
		})
	}
}

// A pod that chose its own interface name (podSelection) and whose record
// is lost must still be torn down from libcni's cache.
func TestNoRecordTeardownFindsCustomIfnames(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Reconfigure(func(c *config.Config) { c.PodSelection = true })
	_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{plan.AnnotationNetworks: "alpha@eth5"}))
	require.NoError(t, err)
	require.NoError(t, f.Store.Delete("sb1"))
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	assert.Equal(t, []string{"ADD alpha eth5", "DEL alpha eth5"}, f.Cmds())
	assert.Equal(t, 0, f.Cached("sb1"))
}
