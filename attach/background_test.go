package attach_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
)

// Planning first, for a background attach, tells what an attach in line
// tells: a refused request is reported (the pod's Warning Event) and
// returned; a pod that gets nothing is a skip, with nothing reported.
func TestPlanFirstReportsAsAttachDoes(t *testing.T) {
	kf := attachtest.NewKube(t, func(c *config.Config) { c.BackgroundAttach = true })
	ctx := context.Background()

	skip, err := kf.Mgr.Background().PlanFirst(ctx, attachtest.NPWGPod("sb1", "other/private"))
	require.Error(t, err)
	assert.False(t, skip)
	assert.Contains(t, err.Error(), "other/private")
	_, failures := kf.Sink.Snapshot()
	require.Len(t, failures, 1, "the refusal is reported")
	assert.Contains(t, failures[0].Err.Error(), "namespace not allowed")

	skip, err = kf.Mgr.Background().PlanFirst(ctx, attachtest.Pod("sb2", 42))
	require.NoError(t, err)
	assert.True(t, skip, "not asking for networks")
	_, failures = kf.Sink.Snapshot()
	assert.Len(t, failures, 1, "nothing more reported")
	assert.Empty(t, kf.Calls(), "planning only")
}
