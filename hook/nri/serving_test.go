package nri

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/reconcile"
)

// Serving (the readiness probe's answer) is true only while connected and
// after the resync that follows the connection finished; a disconnect ends
// it; a resync of an earlier connection never marks a later one served.
func TestServingFollowsConnectionAndResync(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	var runtimes []string
	p.OnRuntime = func(name, version string) { runtimes = append(runtimes, name+" "+version) }
	ctx := context.Background()

	ok, why := p.Serving()
	assert.False(t, ok)
	assert.Contains(t, why, "not connected")

	_, err := p.Configure(ctx, "", "containerd", "v2.4.2")
	require.NoError(t, err)
	ok, why = p.Serving()
	assert.False(t, ok, "connected, not yet synchronized")
	assert.Contains(t, why, "synchronizing")
	assert.Equal(t, []string{"containerd v2.4.2"}, runtimes)
	name, version := p.RuntimeInfo()
	assert.Equal(t, "containerd", name)
	assert.Equal(t, "v2.4.2", version)

	_, err = p.Synchronize(ctx, []*api.PodSandbox{nriPod("sb1", "/pinned/sb1", 10)}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { ok, why = p.Serving(); return ok }, 5*time.Second, 10*time.Millisecond,
		"serving after the resync")
	assert.Contains(t, why, "serving containerd v2.4.2")

	p.disconnected()
	ok, _ = p.Serving()
	assert.False(t, ok, "a disconnect ends serving")

	// A resync of the previous connection finishing late.
	gen := p.connGen()
	_, err = p.Configure(ctx, "", "containerd", "v2.4.2")
	require.NoError(t, err)
	p.synced(gen)
	ok, _ = p.Serving()
	assert.False(t, ok, "an earlier connection's resync does not count")
}

func TestRunningContainersByPod(t *testing.T) {
	got := runningContainers([]*api.Container{
		{Id: "c1", PodSandboxId: "sb1", Name: "app", Pid: 11, State: api.ContainerState_CONTAINER_RUNNING},
		{Id: "c2", PodSandboxId: "sb1", Name: "init", Pid: 0, State: api.ContainerState_CONTAINER_STOPPED},
		{Id: "c3", PodSandboxId: "sb2", Name: "web", Pid: 13, State: api.ContainerState_CONTAINER_CREATED},
		{Id: "c4", PodSandboxId: "sb2", Name: "side", Pid: 14, State: api.ContainerState_CONTAINER_RUNNING},
	})
	assert.Equal(t, map[string][]reconcile.Container{
		"sb1": {{ID: "c1", Name: "app", Pid: 11}},
		"sb2": {{ID: "c4", Name: "side", Pid: 14}},
	}, got, "running only: created ones have not run yet, stopped ones are the kubelet's")
}
