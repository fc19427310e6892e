package oci

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// bundle writes a config.json with the given annotations; netns: "" = no
// network namespace (host), "new" = a new one, else a path to join.
func bundle(t *testing.T, ann map[string]string, netns string) string {
	dir := t.TempDir()
	spec := specs.Spec{Version: specs.Version, Annotations: ann, Linux: &specs.Linux{
		Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}}}}
	switch netns {
	case "":
	case "new":
		spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	default:
		spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netns})
	}
	data, err := json.Marshal(spec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644))
	return dir
}

func runHook(t *testing.T, f *attachtest.Fixture, stage string, st specs.State) error {
	data, err := json.Marshal(st)
	require.NoError(t, err)
	h := &OCIHook{Mgr: f.Mgr, Hook: config.DefaultHookConfig(), Stdin: strings.NewReader(string(data)),
		Log: logrus.NewEntry(logrus.New())}
	return h.Run(context.Background(), stage)
}

func TestOCIHookIdentityFromAnnotations(t *testing.T) {
	tests := []struct {
		name     string
		ann      map[string]string
		wantArgs string
	}{
		{"containerd CRI", map[string]string{"io.kubernetes.cri.sandbox-name": "web", "io.kubernetes.cri.sandbox-namespace": "shop",
			"io.kubernetes.cri.sandbox-uid": "u1", "io.kubernetes.cri.sandbox-id": "sb9"},
			"IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=sb9;K8S_POD_UID=u1"},
		{"CRI-O", map[string]string{"io.kubernetes.pod.name": "api", "io.kubernetes.pod.namespace": "team", "io.kubernetes.pod.uid": "u2"},
			"IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=api;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=u2"},
		{"none", nil, "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=c1;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID="},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, nil)
			require.NoError(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: bundle(t, tc.ann, "new")}))
			calls := f.Calls()
			require.Len(t, calls, 1)
			assert.Equal(t, tc.wantArgs, calls[0].Args)
			assert.Equal(t, "c1", calls[0].ContainerID)
			assert.Equal(t, "/fake/netns/77", calls[0].Netns)
		})
	}
}

func TestOCIHookStateAnnotationsWinAndPinnedPathIsUsed(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	st := specs.State{ID: "c1", Pid: 77, Bundle: bundle(t, map[string]string{"io.kubernetes.pod.name": "from-spec"}, "/run/netns/x"),
		Annotations: map[string]string{"io.kubernetes.pod.name": "from-state"}}
	require.NoError(t, runHook(t, f, StagePrestart, st))
	calls := f.Calls()
	require.Len(t, calls, 1)
	assert.Contains(t, calls[0].Args, "K8S_POD_NAME=from-state")
	assert.Equal(t, "/run/netns/x", calls[0].Netns)
}

func TestOCIHookLifecycle(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	b := bundle(t, nil, "new")
	require.NoError(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: b}))
	require.NoError(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: b}), "repeated createRuntime")
	for _, stage := range []string{"createContainer", "startContainer", "poststart"} {
		require.NoError(t, runHook(t, f, stage, specs.State{ID: "c1", Pid: 77, Bundle: b}))
	}
	f.Netns.Kill("/fake/netns/77") // the container is gone by poststop
	require.NoError(t, runHook(t, f, StagePoststop, specs.State{ID: "c1", Bundle: b}))
	require.NoError(t, runHook(t, f, StagePoststop, specs.State{ID: "c1", Bundle: b}), "repeated poststop")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds(), "one allocation, one release")
	assert.Equal(t, "", f.Calls()[1].Netns, "poststop DELs with an empty netns")
	_, err := f.Store.Get("c1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestOCIHookHostNetnsContainerIsSkipped(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	require.NoError(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: bundle(t, nil, "")}))
	require.NoError(t, runHook(t, f, StagePoststop, specs.State{ID: "c1", Bundle: bundle(t, nil, "")}))
	assert.Empty(t, f.Calls())
}

func TestOCIHookPoststopAfterFailedCreate(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "ADD", "failMsg": "no leases"}})
	b := bundle(t, nil, "new")
	err := runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: b})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "container c1")
	assert.Contains(t, err.Error(), `network "alpha"`)
	assert.Contains(t, err.Error(), "no leases")
	// runc sends poststop after a failed createRuntime: no error, no double DEL.
	require.NoError(t, runHook(t, f, StagePoststop, specs.State{ID: "c1", Bundle: b}))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
}

func TestOCIHookBadInput(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	require.ErrorIs(t, runHook(t, f, "prestop", specs.State{ID: "c1"}), ErrUnknownStage)
	h := &OCIHook{Mgr: f.Mgr, Hook: config.DefaultHookConfig(), Stdin: strings.NewReader("{not json"), Log: logrus.NewEntry(logrus.New())}
	err := h.Run(context.Background(), StageCreateRuntime)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OCI state")
	require.ErrorContains(t, runHook(t, f, StageCreateRuntime, specs.State{Pid: 1}), "no container id")
	require.ErrorContains(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Bundle: bundle(t, nil, "new")}), "no pid")
	assert.Empty(t, f.Calls())
}

func TestOCIHookAutoStageFromStatus(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	b := bundle(t, nil, "new")
	require.NoError(t, runHook(t, f, "", specs.State{ID: "c1", Pid: 77, Status: specs.StateCreating, Bundle: b}))
	require.NoError(t, runHook(t, f, StageAuto, specs.State{ID: "c1", Pid: 77, Status: specs.StateRunning, Bundle: b}))
	f.Netns.Kill("/fake/netns/77")
	require.NoError(t, runHook(t, f, StageAuto, specs.State{ID: "c1", Status: specs.StateStopped, Bundle: b}))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	require.ErrorContains(t, runHook(t, f, "", specs.State{ID: "c1", Status: "paused", Bundle: b}), `status "paused"`)
}

func TestPodCapabilityNotAllowedFailsCreateRuntime(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, allCapsNet())
	ann := map[string]string{plan.AnnotationMAC: "02:00:00:00:00:01"}
	err := runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: bundle(t, ann, "new")})
	require.ErrorIs(t, err, plan.ErrCapabilityNotAllowed)
	assert.Contains(t, err.Error(), "nri-cni.io/mac")
	assert.Contains(t, err.Error(), "podCapabilities")
	assert.Empty(t, f.Calls())
	_, err = f.Store.Get("c1")
	assert.ErrorIs(t, err, state.ErrNotFound)

	allowCapabilities(f, config.CapabilityMAC)
	require.NoError(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: bundle(t, ann, "new")}))
	require.Len(t, f.Calls(), 1)
	assert.Contains(t, string(f.Calls()[0].RuntimeConfig), "02:00:00:00:00:01")
}

// allCapsNet declares every capability, so only podCapabilities decides.
func allCapsNet() map[string]map[string]any {
	return map[string]map[string]any{"alpha": {"capabilities": map[string]bool{
		"mac": true, "bandwidth": true, "ips": true, "portMappings": true}}}
}

func allowCapabilities(f *attachtest.Fixture, caps ...string) {
	f.Reconfigure(func(c *config.Config) { c.PodCapabilities = caps })
}
