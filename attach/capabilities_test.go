package attach_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// allowCapabilities rebuilds the fixture's Manager with podCapabilities =
// caps (the planner computes the allowed set once).
func allowCapabilities(f *attachtest.Fixture, caps ...string) {
	f.T.Helper()
	f.Reconfigure(func(c *config.Config) { c.PodCapabilities = caps })
}

// allCapsNet declares every capability, so only podCapabilities decides.
func allCapsNet() map[string]map[string]any {
	return map[string]map[string]any{"alpha": {"capabilities": map[string]bool{
		"mac": true, "bandwidth": true, "ips": true, "portMappings": true}}}
}

func except(capability string) []string {
	var out []string
	for _, c := range config.KnownCapabilities() {
		if c != capability {
			out = append(out, c)
		}
	}
	return out
}

// capabilityCases: each capability annotation, a valid value, and what the
// plugin must receive in runtimeConfig when it is allowed.
type capabilityCase struct {
	annotation, capability, value string
	wantKey, wantJSON             string // runtimeConfig key and a fragment of its value
}

func capabilityCases() []capabilityCase {
	return []capabilityCase{
		{plan.AnnotationIngressBandwidth, config.CapabilityBandwidth, "10M", "bandwidth", `"ingressRate":10000000`},
		{plan.AnnotationEgressBandwidth, config.CapabilityBandwidth, "1k", "bandwidth", `"egressRate":1000`},
		{plan.AnnotationMAC, config.CapabilityMAC, "02:42:ac:11:00:02", "mac", `"02:42:ac:11:00:02"`},
		{plan.AnnotationIPs, config.CapabilityIPs, "10.9.8.7/24", "ips", `["10.9.8.7/24"]`},
		{plan.AnnotationPortMappings, config.CapabilityPortMappings, `[{"hostPort": 8080, "containerPort": 80}]`,
			"portMappings", `"hostPort":8080`},
	}
}

func TestPodCapabilityAllowedReachesThePlugin(t *testing.T) {
	for _, tc := range capabilityCases() {
		t.Run(tc.annotation, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, allCapsNet())
			allowCapabilities(f, tc.capability) // only this one
			_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{tc.annotation: tc.value}))
			require.NoError(t, err)
			calls := f.Calls()
			require.Len(t, calls, 1)
			var rc map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(calls[0].RuntimeConfig, &rc))
			require.Contains(t, rc, tc.wantKey)
			assert.Contains(t, string(rc[tc.wantKey]), tc.wantJSON)
			assert.Len(t, rc, 1, "only the asked-for capability")
		})
	}
}

func TestPodCapabilityNotAllowedFailsBeforeAnything(t *testing.T) {
	for _, tc := range capabilityCases() {
		t.Run(tc.annotation, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, allCapsNet())
			allowCapabilities(f, except(tc.capability)...)
			_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{tc.annotation: tc.value}))
			require.ErrorIs(t, err, plan.ErrCapabilityNotAllowed)
			var ce *plan.CapabilityError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.annotation, ce.Annotation)
			assert.Equal(t, tc.capability, ce.Capability)
			assert.Equal(t, except(tc.capability), ce.Allowed)
			for _, want := range []string{"ns1/pod-sb1", tc.annotation, `"` + tc.capability + `"`, "podCapabilities"} {
				assert.Contains(t, err.Error(), want)
			}
			assert.Empty(t, f.Calls(), "no CNI call")
			_, err = f.Store.Get("sb1")
			assert.ErrorIs(t, err, state.ErrNotFound, "no intent record")
		})
	}
}

func TestPodCapabilitiesDefaultIsBandwidthOnly(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, allCapsNet())
	require.Equal(t, []string{config.CapabilityBandwidth}, f.Cfg.PodCapabilities)
	_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{
		plan.AnnotationIngressBandwidth: "10M", plan.AnnotationEgressBandwidth: "20M"}))
	require.NoError(t, err)

	_, err = f.Mgr.Attach(context.Background(), annotated("sb2", map[string]string{
		plan.AnnotationPortMappings: `[{"hostPort": 8080, "containerPort": 80}]`}))
	require.ErrorIs(t, err, plan.ErrCapabilityNotAllowed)
	assert.Equal(t, "pod ns1/pod-sb2 (sandbox sb2): annotation nri-cni.io/port-mappings needs capability "+
		`"portMappings", which podCapabilities in nri.conf does not allow (allowed: [bandwidth])`, err.Error())
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds(), "only sb1")
}

func TestPodCapabilitiesNoneAllowed(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, allCapsNet())
	allowCapabilities(f)
	_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{plan.AnnotationEgressBandwidth: "1M"}))
	require.ErrorIs(t, err, plan.ErrCapabilityNotAllowed)
	assert.Contains(t, err.Error(), "(allowed: [])")
	_, err = f.Mgr.Attach(context.Background(), annotated("sb2", nil))
	require.NoError(t, err, "a pod without capability annotations is fine")
}

// A pod that may not use a capability learns that, not that its value is
// malformed: nothing of a refused annotation is parsed.
func TestPodCapabilityNotAllowedWinsOverBadValue(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	_, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{plan.AnnotationMAC: "zz"}))
	require.ErrorIs(t, err, plan.ErrCapabilityNotAllowed)
	assert.NotErrorIs(t, err, plan.ErrBadAnnotation)
}

// Pods nri-cni leaves alone (filtered namespace, opted out) are not judged.
func TestPodCapabilitiesOnlyCheckedForAttachedPods(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Cfg.Namespaces.Exclude = []string{"ns1"}
	allowCapabilities(f, config.DefaultPodCapabilities()...)
	rec, err := f.Mgr.Attach(context.Background(), annotated("sb1", map[string]string{plan.AnnotationIPs: "10.1.2.3/24"}))
	require.NoError(t, err)
	assert.Nil(t, rec)
	assert.Empty(t, f.Calls())
}

// A DEL that finds no libcni cache entry for its ADD gets the ADD's
// capability args and CNI_ARGS from the record, as CNI requires: portmap's
// DEL removes nothing without its portMappings. Before, such a DEL got
// neither, and a portmap ADD cut short by cniTimeout under load left its
// DNAT rule to the rolled-back address behind, in front of the pod's next
// one (issue 32, TestPluginsReachTheHost).
func TestDELWithoutTheCacheGetsTheADDsArgsAndCapabilities(t *testing.T) {
	ann := map[string]string{plan.AnnotationPortMappings: `[{"hostPort": 8080, "containerPort": 80}]`}
	tests := []struct {
		name  string
		extra map[string]any
		// detach runs the DEL (after Attach returned err or nil).
		detach func(t *testing.T, f *attachtest.Fixture)
	}{
		{"rollback of an ADD that failed", map[string]any{"failOn": "ADD"}, func(t *testing.T, f *attachtest.Fixture) {
			testenv.Eventually(t, 10*time.Second, "the rollback to finish", func() bool {
				_, err := f.Store.Get("sb1")
				return errors.Is(err, state.ErrNotFound)
			})
		}},
		{"teardown after the cache entry was lost", nil, func(t *testing.T, f *attachtest.Fixture) {
			require.NoError(t, os.RemoveAll(f.CacheDir))
			require.NoError(t, f.Mgr.Detach(context.Background(), annotated("sb1", ann), true))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nets := allCapsNet()
			for k, v := range tc.extra {
				nets["alpha"][k] = v
			}
			f := attachtest.New(t, []string{"alpha"}, nets)
			allowCapabilities(f, config.CapabilityPortMappings)
			_, _ = f.Mgr.Attach(context.Background(), annotated("sb1", ann))
			tc.detach(t, f)
			calls := f.Calls()
			require.Len(t, calls, 2, "one ADD, one DEL")
			add, del := calls[0], calls[1]
			require.Equal(t, []string{"ADD", "DEL"}, []string{add.Cmd, del.Cmd})
			assert.Contains(t, string(add.RuntimeConfig), `"hostPort":8080`)
			assert.JSONEq(t, string(add.RuntimeConfig), string(del.RuntimeConfig), "the DEL's runtimeConfig is the ADD's")
			assert.Equal(t, add.Args, del.Args, "the DEL's CNI_ARGS are the ADD's")
		})
	}
}
