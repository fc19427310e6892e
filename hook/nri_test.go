package hook

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func nriPod(id string, netnsPath string, pid uint32) *api.PodSandbox {
	p := &api.PodSandbox{Id: id, Name: "web", Namespace: "team", Uid: "u-1", Pid: pid, Linux: &api.LinuxPodSandbox{}}
	p.Linux.Namespaces = []*api.LinuxNamespace{{Type: "ipc"}, {Type: "uts"}}
	if netnsPath != "" {
		p.Linux.Namespaces = append(p.Linux.Namespaces, &api.LinuxNamespace{Type: "network", Path: netnsPath})
	}
	return p
}

func TestSandboxOfTranslatesThePod(t *testing.T) {
	sb, path := sandboxOf(nriPod("abc", "/var/run/netns/cni-1", 77))
	assert.Equal(t, "/var/run/netns/cni-1", path)
	assert.Equal(t, Sandbox{ID: "abc", Kind: "pod", Pid: 77, Pinned: "/var/run/netns/cni-1",
		Pod: sb.Pod}, sb)
	assert.Equal(t, "team", sb.Pod.Namespace)
	assert.Equal(t, "web", sb.Pod.Name)
	assert.Equal(t, "u-1", sb.Pod.UID)
	assert.Equal(t, "abc", sb.Pod.InfraID)
}

func TestPluginHandlers(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	p := NewPlugin(f.mgr, nil, logrus.NewEntry(logrus.New()))
	ctx := context.Background()

	// Host-network pod: no network namespace, left alone.
	require.NoError(t, p.RunPodSandbox(ctx, nriPod("host1", "", 10)))
	assert.Empty(t, f.calls())

	require.NoError(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)))
	require.NoError(t, p.StopPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 0)))
	require.NoError(t, p.RemovePodSandbox(ctx, nriPod("sb1", "", 0)))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.cmds())
	assert.Equal(t, "/pinned/sb1", f.calls()[1].Netns)
}

func TestPrelaunchedPluginNeedsConfigure(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	var got string
	p := NewPlugin(nil, func(_ context.Context, cfg string) (*Manager, error) {
		got = cfg
		return f.mgr, nil
	}, logrus.NewEntry(logrus.New()))
	ctx := context.Background()
	require.ErrorIs(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)), errNotConfigured)
	_, err := p.Configure(ctx, "networks: [alpha]", "containerd", "2.4.2")
	require.NoError(t, err)
	assert.Equal(t, "networks: [alpha]", got)
	require.NoError(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)))
	assert.Equal(t, []string{"ADD alpha net1"}, f.cmds())
}
