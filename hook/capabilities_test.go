package hook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// allowCapabilities rebuilds the fixture's Manager with podCapabilities =
// caps (the Manager computes the allowed set once, at NewManager).
func (f *fixture) allowCapabilities(caps ...string) {
	f.t.Helper()
	f.cfg.PodCapabilities = caps
	f.mgr = NewManager(f.cfg, f.mgr.Engine(), f.ns, f.mgr.Store(), nil)
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
		{AnnotationIngressBandwidth, config.CapabilityBandwidth, "10M", "bandwidth", `"ingressRate":10000000`},
		{AnnotationEgressBandwidth, config.CapabilityBandwidth, "1k", "bandwidth", `"egressRate":1000`},
		{AnnotationMAC, config.CapabilityMAC, "02:42:ac:11:00:02", "mac", `"02:42:ac:11:00:02"`},
		{AnnotationIPs, config.CapabilityIPs, "10.9.8.7/24", "ips", `["10.9.8.7/24"]`},
		{AnnotationPortMappings, config.CapabilityPortMappings, `[{"hostPort": 8080, "containerPort": 80}]`,
			"portMappings", `"hostPort":8080`},
	}
}

func TestPodCapabilityAllowedReachesThePlugin(t *testing.T) {
	for _, tc := range capabilityCases() {
		t.Run(tc.annotation, func(t *testing.T) {
			f := newFixture(t, []string{"alpha"}, allCapsNet())
			f.allowCapabilities(tc.capability) // only this one
			_, err := f.mgr.Attach(context.Background(), annotated("sb1", map[string]string{tc.annotation: tc.value}))
			require.NoError(t, err)
			calls := f.calls()
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
			f := newFixture(t, []string{"alpha"}, allCapsNet())
			f.allowCapabilities(except(tc.capability)...)
			_, err := f.mgr.Attach(context.Background(), annotated("sb1", map[string]string{tc.annotation: tc.value}))
			require.ErrorIs(t, err, ErrCapabilityNotAllowed)
			var ce *CapabilityError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.annotation, ce.Annotation)
			assert.Equal(t, tc.capability, ce.Capability)
			assert.Equal(t, except(tc.capability), ce.Allowed)
			for _, want := range []string{"ns1/pod-sb1", tc.annotation, `"` + tc.capability + `"`, "podCapabilities"} {
				assert.Contains(t, err.Error(), want)
			}
			assert.Empty(t, f.calls(), "no CNI call")
			_, err = f.mgr.Store().Get("sb1")
			assert.ErrorIs(t, err, state.ErrNotFound, "no intent record")
		})
	}
}

func TestPodCapabilitiesDefaultIsBandwidthOnly(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, allCapsNet())
	require.Equal(t, []string{config.CapabilityBandwidth}, f.cfg.PodCapabilities)
	_, err := f.mgr.Attach(context.Background(), annotated("sb1", map[string]string{
		AnnotationIngressBandwidth: "10M", AnnotationEgressBandwidth: "20M"}))
	require.NoError(t, err)

	_, err = f.mgr.Attach(context.Background(), annotated("sb2", map[string]string{
		AnnotationPortMappings: `[{"hostPort": 8080, "containerPort": 80}]`}))
	require.ErrorIs(t, err, ErrCapabilityNotAllowed)
	assert.Equal(t, "pod ns1/pod-sb2 (sandbox sb2): annotation nri-cni.io/port-mappings needs capability "+
		`"portMappings", which podCapabilities in nri.conf does not allow (allowed: [bandwidth])`, err.Error())
	assert.Equal(t, []string{"ADD alpha net1"}, f.cmds(), "only sb1")
}

func TestPodCapabilitiesNoneAllowed(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, allCapsNet())
	f.allowCapabilities()
	_, err := f.mgr.Attach(context.Background(), annotated("sb1", map[string]string{AnnotationEgressBandwidth: "1M"}))
	require.ErrorIs(t, err, ErrCapabilityNotAllowed)
	assert.Contains(t, err.Error(), "(allowed: [])")
	_, err = f.mgr.Attach(context.Background(), annotated("sb2", nil))
	require.NoError(t, err, "a pod without capability annotations is fine")
}

// A pod that may not use a capability learns that, not that its value is
// malformed: nothing of a refused annotation is parsed.
func TestPodCapabilityNotAllowedWinsOverBadValue(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	_, err := f.mgr.Attach(context.Background(), annotated("sb1", map[string]string{AnnotationMAC: "zz"}))
	require.ErrorIs(t, err, ErrCapabilityNotAllowed)
	assert.NotErrorIs(t, err, ErrBadAnnotation)
}

// Pods nri-cni leaves alone (filtered namespace, opted out) are not judged.
func TestPodCapabilitiesOnlyCheckedForAttachedPods(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	f.cfg.Namespaces.Exclude = []string{"ns1"}
	f.allowCapabilities(config.DefaultPodCapabilities()...)
	rec, err := f.mgr.Attach(context.Background(), annotated("sb1", map[string]string{AnnotationIPs: "10.1.2.3/24"}))
	require.NoError(t, err)
	assert.Nil(t, rec)
	assert.Empty(t, f.calls())
}

func TestPodCapabilityNotAllowedFailsRunPodSandbox(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, allCapsNet())
	p := NewPlugin(f.mgr, nil, logrus.NewEntry(logrus.New()))
	pod := nriPod("sb1", "/pinned/sb1", 10)
	pod.Annotations = map[string]string{AnnotationIPs: "10.99.0.1/24"}
	err := p.RunPodSandbox(context.Background(), pod)
	require.ErrorIs(t, err, ErrCapabilityNotAllowed)
	assert.Contains(t, err.Error(), "nri-cni.io/ips")
	assert.Empty(t, f.calls())
	_, err = f.mgr.Store().Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestPodCapabilityNotAllowedFailsCreateRuntime(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, allCapsNet())
	ann := map[string]string{AnnotationMAC: "02:00:00:00:00:01"}
	err := runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: bundle(t, ann, "new")})
	require.ErrorIs(t, err, ErrCapabilityNotAllowed)
	assert.Contains(t, err.Error(), "nri-cni.io/mac")
	assert.Contains(t, err.Error(), "podCapabilities")
	assert.Empty(t, f.calls())
	_, err = f.mgr.Store().Get("c1")
	assert.ErrorIs(t, err, state.ErrNotFound)

	f.allowCapabilities(config.CapabilityMAC)
	require.NoError(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: bundle(t, ann, "new")}))
	require.Len(t, f.calls(), 1)
	assert.Contains(t, string(f.calls()[0].RuntimeConfig), "02:00:00:00:00:01")
}

func TestParseBandwidth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"10M", 10_000_000, ""},
		{" 1Gi ", 1 << 30, ""},
		{"1.5k", 1500, ""},
		{"1e6", 1_000_000, ""},
		{"2E+3", 2000, ""},
		{"999", 0, "between 1k and 1P"},
		{"2P", 0, "between 1k and 1P"},
		{"-5M", 0, "want a quantity"},
		{"10 M", 0, "want a quantity"},
		{"0x10", 0, "want a quantity"},
		{"1e-999999999", 0, "want a quantity"}, // ParseQuantity alone: minutes
		{"1e999999999", 0, "want a quantity"},
		{strings.Repeat("9", 40), 0, "want a quantity"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			type result struct {
				rate int64
				err  error
			}
			done := make(chan result, 1)
			go func() { r, err := parseBandwidth(tc.in); done <- result{r, err} }()
			var got result
			select {
			case got = <-done:
			case <-time.After(30 * time.Second): // the unchecked parse hangs for minutes
				t.Fatalf("parseBandwidth(%q) still running after 30 s", tc.in)
			}
			if tc.err != "" {
				require.Error(t, got.err)
				assert.Contains(t, got.err.Error(), tc.err)
				return
			}
			require.NoError(t, got.err)
			assert.Equal(t, tc.want, got.rate)
		})
	}
}
