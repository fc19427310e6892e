package hook

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
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

// CRI-O pins a bind of the host's netns for hostNetwork pods and lists it
// like any other: the pod is skipped (no error, no CNI call, no record),
// while a pid/pinned disagreement is still refused.
func TestHostNetworkPodWithPinnedHostNetns(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	p := NewPlugin(f.mgr, nil, logrus.NewEntry(logrus.New()))
	ctx := context.Background()

	f.ns.resolveErr = fmt.Errorf("/run/netns/h %w", netns.ErrHostNetwork)
	for _, pid := range []uint32{0, 10} { // infra dropped (Pid 0) and kept
		require.NoError(t, p.RunPodSandbox(ctx, nriPod("host1", "/run/netns/h", pid)))
		require.NoError(t, p.StopPodSandbox(ctx, nriPod("host1", "/run/netns/h", 0)))
		require.NoError(t, p.RemovePodSandbox(ctx, nriPod("host1", "", 0)))
	}
	assert.Empty(t, f.calls(), "never a CNI call")
	_, err := f.mgr.Store().Get("host1")
	assert.ErrorIs(t, err, state.ErrNotFound)

	f.ns.resolveErr = fmt.Errorf("pid 10 vs /run/netns/h: %w", netns.ErrMismatch)
	err = p.RunPodSandbox(ctx, nriPod("odd", "/run/netns/h", 10))
	require.ErrorIs(t, err, netns.ErrMismatch, "a disagreement is refused")
	assert.Empty(t, f.calls())
}

// Synchronize learns from Configure's runtime name whether Pid 0 can be a
// running pod: CRI-O yes (infra container dropped), containerd no.
func TestSynchronizeAttachRuleFollowsTheRuntime(t *testing.T) {
	for runtime, want := range map[string]int{"cri-o": 1, "containerd": 0} {
		t.Run(runtime, func(t *testing.T) {
			f := newFixture(t, []string{"alpha"}, nil)
			logger, logs := logtest.NewNullLogger()
			p := NewPlugin(f.mgr, nil, logrus.NewEntry(logger))
			ctx := context.Background()
			_, err := p.Configure(ctx, "", runtime, "1.0")
			require.NoError(t, err)
			f.ns.Resolve(0, "/pinned/p0") // its netns exists
			_, err = p.Synchronize(ctx, []*api.PodSandbox{nriPod("p0", "/pinned/p0", 0)}, nil)
			require.NoError(t, err)
			testenv.Eventually(t, 10*time.Second, "the resync", func() bool {
				for _, e := range logs.AllEntries() {
					if e.Message == "resync with the runtime done" {
						return true
					}
				}
				return false
			})
			adds := 0
			for _, c := range f.calls() {
				if c.Cmd == "ADD" {
					adds++
				}
			}
			assert.Equal(t, want, adds)
		})
	}
}
