package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
)

// With the default podCapabilities (bandwidth), a pod asking for a host port
// through nri-cni.io/port-mappings fails RunPodSandbox with an error naming
// the annotation and the config key, and nothing is attached; a bandwidth
// annotation still reaches the chain.
func TestPodCapabilities(t *testing.T) {
	// The recorder declares both capabilities: only podCapabilities decides.
	s := newSuite(t, world.ctd, suiteOpts{recorder: map[string]any{
		"capabilities": map[string]bool{"portMappings": true, "bandwidth": true}}})
	_, err := s.run(harness.PodSpec{Name: "hostport", Annotations: map[string]string{
		"nri-cni.io/port-mappings": `[{"hostPort": 18081, "containerPort": 80}]`}})
	require.Error(t, err, "RunPodSandbox must fail")
	for _, want := range []string{"annotation nri-cni.io/port-mappings", `capability "portMappings"`,
		"podCapabilities in nri.conf does not allow (allowed: [bandwidth])"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Zero(t, s.count("ADD", ""), "no CNI ADD for the refused pod")
	assert.Empty(t, s.cfg.StateFiles(), "no record for the refused pod")
	pods, err := s.cri.ListPods(s.ctx, owner(t))
	require.NoError(t, err)
	// containerd removes the refused sandbox itself — unless its own rollback
	// fails (seen under CPU load: "failed to delete task … not found"); then
	// it keeps it NOTREADY until the kubelet (here the cleanup) removes it.
	for _, p := range pods {
		assert.Equal(t, "SANDBOX_NOTREADY", p.State.String(), "a refused sandbox containerd kept is not running")
	}

	id, err := s.run(harness.PodSpec{Name: "shaped", Annotations: map[string]string{
		"kubernetes.io/ingress-bandwidth": "10M"}})
	require.NoError(t, err, "bandwidth is allowed by default")
	adds := 0
	for _, c := range s.calls() {
		if c.Cmd == "ADD" && c.ContainerID == id {
			adds++
			assert.Contains(t, string(c.RuntimeConfig), `"ingressRate":10000000`)
			assert.NotContains(t, string(c.RuntimeConfig), "portMappings")
		}
	}
	assert.Equal(t, 1, adds, "one ADD for the allowed pod")

	require.NoError(t, s.cri.StopPod(s.ctx, id))
	require.NoError(t, s.cri.RemovePod(s.ctx, id))
	s.assertNoLeaks()
}
