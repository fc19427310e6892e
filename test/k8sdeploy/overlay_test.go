package k8sdeploy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
)

// The overlay's DaemonSet patch, against the shipped deploy/base (no root):
// every hostPath gets its private stand-in, the metrics address and the
// netns mount move, every container is imagePullPolicy Never.
func TestDaemonSetOps(t *testing.T) {
	b, err := deploy.LoadBase(harness.RepoRoot())
	require.NoError(t, err)
	o := &Overlay{MetricsAddr: "127.0.0.1:1", StateDir: "/s", CacheDir: "/c", CNIBin: "/b", CNIConf: "/f", NRIDir: "/n", NetnsDir: "/x"}
	ops, err := daemonSetOps(b, o)
	require.NoError(t, err)
	got := map[string]any{}
	for _, op := range ops {
		assert.Equal(t, "replace", op.Op, op.Path)
		got[op.Path] = op.Value
	}
	ps := b.DaemonSet.Spec.Template.Spec
	for i, v := range ps.Volumes {
		if v.HostPath != nil {
			assert.Contains(t, []any{"/s", "/c", "/b", "/f", "/n", "/x"}, got[fmt.Sprintf("/spec/template/spec/volumes/%d/hostPath/path", i)], v.Name)
		}
	}
	for i, c := range ps.Containers {
		assert.Equal(t, "Never", got[fmt.Sprintf("/spec/template/spec/containers/%d/imagePullPolicy", i)], c.Name)
	}
	for i, c := range ps.InitContainers {
		assert.Equal(t, "Never", got[fmt.Sprintf("/spec/template/spec/initContainers/%d/imagePullPolicy", i)], c.Name)
	}
	assert.Contains(t, valuesOf(got), "127.0.0.1:1", "metrics address")
	assert.Contains(t, valuesOf(got), "/x", "netns mount path")
}

func valuesOf(m map[string]any) []any {
	var out []any
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
		want int
	}{
		{[]string{"run", "--metrics-addr", "x"}, "--metrics-addr", 2},
		{[]string{"run", "--metrics-addr"}, "--metrics-addr", -1},
		{[]string{"run"}, "--addr", -1},
	} {
		assert.Equal(t, tc.want, flagValue(tc.args, tc.flag), "%v %s", tc.args, tc.flag)
	}
}
