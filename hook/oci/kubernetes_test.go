package oci

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
)

// TestOCIHookRefusesAKubernetesSection: hook mode has no Kubernetes mode,
// in either build. An attach fails naming the section (also with
// failurePolicy ignore: the config is wrong, not the attach); a detach of
// what was attached before the section came still runs.
func TestOCIHookRefusesAKubernetesSection(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	b := bundle(t, nil, "new")
	require.NoError(t, runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Bundle: b}))
	f.Reconfigure(func(c *config.Config) {
		c.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true}
		c.FailurePolicy = config.FailurePolicyIgnore
	})
	for _, stage := range []string{StageCreateRuntime, StagePrestart, StageAuto} {
		err := runHook(t, f, stage, specs.State{ID: "c2", Pid: 78, Bundle: b, Status: specs.StateCreating})
		require.ErrorIs(t, err, ErrKubernetesSection, stage)
		assert.Contains(t, err.Error(), "container c2")
		assert.Contains(t, err.Error(), "kubernetes section")
	}
	// kubernetes.multiNetworkPolicy is part of the section: refused alike.
	f.Reconfigure(func(c *config.Config) {
		c.Kubernetes = &config.KubernetesConfig{MultiNetworkPolicy: &config.MultiNetworkPolicyConfig{Enabled: true}}
	})
	err := runHook(t, f, StageCreateRuntime, specs.State{ID: "c3", Pid: 79, Bundle: b, Status: specs.StateCreating})
	require.ErrorIs(t, err, ErrKubernetesSection)
	f.Netns.Kill("/fake/netns/77")
	require.NoError(t, runHook(t, f, StagePoststop, specs.State{ID: "c1", Bundle: b}))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds(), "c1 detached, c2 never attached")
}
