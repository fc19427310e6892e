package nri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/ttrpc"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/plan"
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
	assert.Equal(t, attach.Sandbox{ID: "abc", Kind: "pod", Pid: 77, Pinned: "/var/run/netns/cni-1",
		Pod: sb.Pod}, sb)
	assert.Equal(t, "team", sb.Pod.Namespace)
	assert.Equal(t, "web", sb.Pod.Name)
	assert.Equal(t, "u-1", sb.Pod.UID)
	assert.Equal(t, "abc", sb.Pod.InfraID)
	assert.Nil(t, sb.Labels)

	// The pod's labels, without the kubelet's own (MultiNetworkPolicy
	// selects the pod by them).
	pod := nriPod("abc", "/var/run/netns/cni-1", 77)
	pod.Labels = map[string]string{"app": "web", "tier": "io.kubernetes.pod.x", "io.kubernetes.pod.name": "web",
		"io.kubernetes.pod.namespace": "team", "io.kubernetes.pod.uid": "u-1"}
	sb, _ = sandboxOf(pod)
	assert.Equal(t, map[string]string{"app": "web", "tier": "io.kubernetes.pod.x"}, sb.Labels)
	pod.Labels = map[string]string{"io.kubernetes.pod.name": "web"}
	sb, _ = sandboxOf(pod)
	assert.Nil(t, sb.Labels)
}

func TestPluginHandlers(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	ctx := context.Background()

	// Host-network pod: no network namespace, left alone.
	require.NoError(t, p.RunPodSandbox(ctx, nriPod("host1", "", 10)))
	assert.Empty(t, f.Calls())

	require.NoError(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)))
	require.NoError(t, p.StopPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 0)))
	require.NoError(t, p.RemovePodSandbox(ctx, nriPod("sb1", "", 0)))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	assert.Equal(t, "/pinned/sb1", f.Calls()[1].Netns)
}

func TestPrelaunchedPluginNeedsConfigure(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	var got string
	p := New(nil, func(_ context.Context, cfg string) (*Engine, error) {
		got = cfg
		return testEngine(f.Mgr), nil
	}, logrus.NewEntry(logrus.New()))
	ctx := context.Background()
	require.ErrorIs(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)), errNotConfigured)
	_, err := p.Configure(ctx, "networks: [alpha]", "containerd", "2.4.2")
	require.NoError(t, err)
	assert.Equal(t, "networks: [alpha]", got)
	require.NoError(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)))
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
}

// CRI-O pins a bind of the host's netns for hostNetwork pods and lists it
// like any other: the pod is skipped (no error, no CNI call, no record),
// while a pid/pinned disagreement is still refused.
func TestHostNetworkPodWithPinnedHostNetns(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	ctx := context.Background()

	f.Netns.ResolveErr = fmt.Errorf("/run/netns/h %w", netns.ErrHostNetwork)
	for _, pid := range []uint32{0, 10} { // infra dropped (Pid 0) and kept
		require.NoError(t, p.RunPodSandbox(ctx, nriPod("host1", "/run/netns/h", pid)))
		require.NoError(t, p.StopPodSandbox(ctx, nriPod("host1", "/run/netns/h", 0)))
		require.NoError(t, p.RemovePodSandbox(ctx, nriPod("host1", "", 0)))
	}
	assert.Empty(t, f.Calls(), "never a CNI call")
	_, err := f.Store.Get("host1")
	assert.ErrorIs(t, err, state.ErrNotFound)

	f.Netns.ResolveErr = fmt.Errorf("pid 10 vs /run/netns/h: %w", netns.ErrMismatch)
	err = p.RunPodSandbox(ctx, nriPod("odd", "/run/netns/h", 10))
	require.ErrorIs(t, err, netns.ErrMismatch, "a disagreement is refused")
	assert.Empty(t, f.Calls())
}

// Synchronize learns from Configure's runtime name whether Pid 0 can be a
// running pod: CRI-O yes (infra container dropped), containerd no.
func TestSynchronizeAttachRuleFollowsTheRuntime(t *testing.T) {
	for runtime, want := range map[string]int{"cri-o": 1, "containerd": 0} {
		t.Run(runtime, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, nil)
			logger, logs := logtest.NewNullLogger()
			p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logger))
			ctx := context.Background()
			_, err := p.Configure(ctx, "", runtime, "1.0")
			require.NoError(t, err)
			f.Netns.Resolve(0, "/pinned/p0") // its netns exists
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
			for _, c := range f.Calls() {
				if c.Cmd == "ADD" {
					adds++
				}
			}
			assert.Equal(t, want, adds)
		})
	}
}

func TestPodCapabilityNotAllowedFailsRunPodSandbox(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, allCapsNet())
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := nriPod("sb1", "/pinned/sb1", 10)
	pod.Annotations = map[string]string{plan.AnnotationIPs: "10.99.0.1/24"}
	err := p.RunPodSandbox(context.Background(), pod)
	require.ErrorIs(t, err, plan.ErrCapabilityNotAllowed)
	assert.Contains(t, err.Error(), "nri-cni.io/ips")
	assert.Empty(t, f.Calls())
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

// A DEL that keeps failing must not block the pod's deletion: Stop and
// Remove answer success, the record stays, and the background retry releases
// the network once the plugin works again.
func TestFailedTeardownNeverBlocksDeletionAndIsRetried(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken")
	require.NoError(t, os.WriteFile(broken, nil, 0o600))
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "DEL", "failWhile": broken}})
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	ctx := context.Background()

	require.NoError(t, p.RunPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 10)))
	require.NoError(t, p.StopPodSandbox(ctx, nriPod("sb1", "/pinned/sb1", 0)), "Stop answers success")
	require.NoError(t, p.RemovePodSandbox(ctx, nriPod("sb1", "", 0)), "Remove answers success")
	_, err := f.Store.Get("sb1")
	require.NoError(t, err, "the record is kept for the retry")
	assert.Equal(t, 1, f.Mgr.PendingTeardowns())

	f.Mgr.RetryTeardowns(ctx, time.Now().Add(time.Hour)) // still broken: rescheduled
	assert.Equal(t, 1, f.Mgr.PendingTeardowns())

	require.NoError(t, os.Remove(broken)) // the plugin works again
	f.Mgr.RetryTeardowns(ctx, time.Now().Add(time.Hour))
	assert.Zero(t, f.Mgr.PendingTeardowns())
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound, "released and forgotten")
	assert.Equal(t, 0, f.Cached("sb1"))
	dels := 0
	for _, c := range f.AttachCmds() {
		if c == "DEL alpha net1" {
			dels++
		}
	}
	assert.GreaterOrEqual(t, dels, 3, "Stop, Remove and the retries each tried")
}

func TestFailurePolicyIgnore(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "ADD"}})
	f.Reconfigure(func(c *config.Config) { c.FailurePolicy = config.FailurePolicyIgnore })
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	require.NoError(t, p.RunPodSandbox(context.Background(), nriPod("sb1", "/pinned/sb1", 10)), "the pod starts")
	_, err := f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound, "and nothing stays attached")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
}

// allCapsNet declares every capability, so only podCapabilities decides.
func allCapsNet() map[string]map[string]any {
	return map[string]map[string]any{"alpha": {"capabilities": map[string]bool{
		"mac": true, "bandwidth": true, "ips": true, "portMappings": true}}}
}

// The runtime closing the connection, however the stub reports it, is a
// shutdown, not an error (CRI-O's stop surfaced as io.EOF).
func TestClosedByRuntime(t *testing.T) {
	for _, err := range []error{errConnClosed, ttrpc.ErrServerClosed, ttrpc.ErrClosed, io.EOF, fmt.Errorf("read: %w", io.EOF)} {
		assert.True(t, ClosedByRuntime(err), "%v", err)
	}
	assert.False(t, ClosedByRuntime(errors.New("connection refused")))
}
