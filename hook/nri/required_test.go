package nri

import (
	"context"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
)

func TestRequires(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"none", nil, false},
		{"pod key, JSON", map[string]string{RequiredAnnotation: `["nri-cni"]`}, true},
		{"pod key, with others", map[string]string{RequiredAnnotation: `["gpu", "nri-cni"]`}, true},
		{"pod key, flow list", map[string]string{RequiredAnnotation: `[gpu, nri-cni]`}, true},
		{"pod key, block list", map[string]string{RequiredAnnotation: "- gpu\n- nri-cni\n"}, true},
		{"idx-name", map[string]string{RequiredAnnotation: `["10-nri-cni"]`}, true},
		{"other idx", map[string]string{RequiredAnnotation: `["20-nri-cni"]`}, false},
		{"others only", map[string]string{RequiredAnnotation: `["gpu"]`}, false},
		{"empty list", map[string]string{RequiredAnnotation: `[]`}, false},
		{"bare key", map[string]string{"required-plugins.noderesource.dev": `["nri-cni"]`}, true},
		{"pod key wins over the bare key", map[string]string{RequiredAnnotation: `["gpu"]`,
			"required-plugins.noderesource.dev": `["nri-cni"]`}, false},
		{"not a list", map[string]string{RequiredAnnotation: `nri-cni`}, false},
		{"garbage", map[string]string{RequiredAnnotation: `[`}, false},
		{"oversized", map[string]string{RequiredAnnotation: `["nri-cni", "` + strings.Repeat("x", 5000) + `"]`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, requires(tc.ann, "nri-cni", "10"))
		})
	}
}

// A pod that gets networks without requiring nri-cni is counted (the
// required-plugins policy is missing or bypassed); one that requires it, or
// gets no networks, is not.
func TestUnprotectedPodsCounted(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	p.Name, p.Idx = "nri-cni", "10"
	unprotected := 0
	p.OnUnprotected = func() { unprotected++ }
	ctx := context.Background()
	require.NoError(t, p.RunPodSandbox(ctx, nriPod("bare", "/pinned/bare", 10)))
	assert.Equal(t, 1, unprotected)
	req := nriPod("req", "/pinned/req", 10)
	req.Annotations = map[string]string{RequiredAnnotation: `["nri-cni"]`}
	require.NoError(t, p.RunPodSandbox(ctx, req))
	require.NoError(t, p.RunPodSandbox(ctx, nriPod("host", "", 10)))
	assert.Equal(t, 1, unprotected)
	// Again for a pod already attached: no second warning.
	require.NoError(t, p.RunPodSandbox(ctx, nriPod("bare", "/pinned/bare", 10)))
	assert.Equal(t, 2, unprotected, "a repeated Run is a new report (rare; harmless)")
}
