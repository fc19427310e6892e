package reconcile

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// countingObserver is the metrics' side of the report.
type countingObserver struct {
	mu      sync.Mutex
	started int
}

func (o *countingObserver) Op(string, string, string, time.Duration) {}
func (o *countingObserver) StartedWithoutNetworks(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started += n
}

// A resync that attaches a pod whose containers already run (the node let
// them start while nri-cni was away) reports it: sink (a Warning Event in
// Kubernetes mode), metric, log. Pods it attached before, pods with no
// networks and pods whose containers were refused (none running) are not
// reported.
func TestSyncReportsContainersStartedWithoutNetworks(t *testing.T) {
	f := attachtest.NewKube(t, func(c *config.Config) { c.Kubernetes.NPWGAnnotation = false })
	obs := &countingObserver{}
	f.Mgr.SetObserver(obs)
	ctx := context.Background()
	known := pinnedWith("known", "alpha")
	_, err := f.Mgr.Attach(ctx, known)
	require.NoError(t, err)
	for _, p := range []string{"/pinned/late", "/pinned/refused", "/pinned/plain"} {
		f.Netns.Resolve(0, p)
	}
	late, refused, plain := pinnedWith("late", "alpha"), pinnedWith("refused", "alpha"), pinnedPod("plain", "/pinned/plain")
	running := map[string][]Container{
		"late":  {{ID: "c1", Name: "app", Pid: 101}, {ID: "c2", Name: "sidecar", Pid: 102}},
		"known": {{ID: "c3", Name: "app", Pid: 103}},
		"plain": {{ID: "c4", Name: "app", Pid: 104}},
	}
	r := NewResyncer(f.Mgr, attachtest.Log())
	res := r.Sync(ctx, []attach.Sandbox{known, late, refused, plain},
		SyncOptions{AttachMissing: true, PidlessPods: true, Running: running})
	require.NoError(t, res.Err())
	assert.Equal(t, 2, res.Attached, "late and refused")
	got := f.Sink.Started()
	require.Len(t, got, 1, "only the pod whose containers ran without its networks")
	assert.Equal(t, attach.StartedWithout{Namespace: "ns1", Name: "pod-late", UID: "uid-late", SandboxID: "late",
		Containers: []string{"app", "sidecar"}, Attached: true}, got[0])
	assert.Equal(t, 2, obs.started, "the metric counts containers")
}

// A pod whose attach fails with containers running is reported too (it
// runs without its networks), not restarted.
func TestSyncReportsStartedPodWhoseAttachFails(t *testing.T) {
	f := attachtest.NewKube(t, func(c *config.Config) {
		c.Kubernetes.NPWGAnnotation = false
		c.FailClosed.RestartStarted = true
	})
	f.Netns.Resolve(0, "/pinned/bad")
	bad := pinnedWith("bad", "nosuchnet")
	res := NewResyncer(f.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{bad},
		SyncOptions{AttachMissing: true, PidlessPods: true, Running: map[string][]Container{"bad": {{Name: "app", Pid: 1}}}})
	assert.Equal(t, 1, res.Failed)
	got := f.Sink.Started()
	require.Len(t, got, 1)
	assert.False(t, got[0].Attached)
	assert.False(t, got[0].Restarting, "never restarted into a pod without its networks")
}

// failClosed.restartStarted: once the pod is attached, its running
// containers are stopped (SIGTERM) so the kubelet starts them again with the
// networks in place.
func TestSyncRestartsContainersStartedWithoutNetworks(t *testing.T) {
	f := attachtest.NewKube(t, func(c *config.Config) {
		c.Kubernetes.NPWGAnnotation = false
		c.FailClosed.RestartStarted = true
		c.FailClosed.RestartGrace = config.Duration(10 * time.Second)
	})
	f.Netns.Resolve(0, "/pinned/late")
	app, exited := sleeper(t)

	r := NewResyncer(f.Mgr, attachtest.Log())
	res := r.Sync(context.Background(), []attach.Sandbox{pinnedWith("late", "alpha")}, SyncOptions{AttachMissing: true,
		PidlessPods: true, Running: map[string][]Container{"late": {{Name: "app", Pid: uint32(app.Process.Pid)}}}})
	require.NoError(t, res.Err())
	r.WaitRestarts()
	select {
	case err := <-exited:
		require.Error(t, err, "stopped by a signal")
		assert.Contains(t, err.Error(), "terminated")
	case <-time.After(5 * time.Second):
		t.Fatal("the container was not stopped")
	}
	got := f.Sink.Started()
	require.Len(t, got, 1)
	assert.True(t, got[0].Restarting)
}

// pinnedWith is a pod pinned at /pinned/<id> asking for networks with
// nri-cni.io/networks.
func pinnedWith(id, networks string) attach.Sandbox {
	sb := pinnedPod(id, "/pinned/"+id)
	sb.Annotations = map[string]string{"nri-cni.io/networks": networks}
	return sb
}

// fixedResolver says every pid is (ok) or is not in the pinned namespace.
type fixedResolver struct{ ok bool }

func (r fixedResolver) ResolveRunning(pid uint32, pinned string) (netns.Netns, error) {
	if !r.ok {
		return netns.Netns{}, netns.ErrHostNetns
	}
	return netns.Netns{Path: pinned}, nil
}

func TestStopContainer(t *testing.T) {
	start := func(t *testing.T, script string) (*exec.Cmd, chan error) {
		cmd := exec.Command("sh", "-c", script)
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		time.Sleep(100 * time.Millisecond) // the trap is set
		return cmd, done
	}
	ctx := context.Background()
	t.Run("SIGTERM", func(t *testing.T) {
		cmd, done := start(t, "exec sleep 60")
		killed, err := StopContainer(ctx, fixedResolver{ok: true}, "/pinned/x", uint32(cmd.Process.Pid), 5*time.Second)
		require.NoError(t, err)
		assert.False(t, killed)
		assert.ErrorContains(t, <-done, "terminated")
	})
	t.Run("SIGKILL after the grace period", func(t *testing.T) {
		cmd, done := start(t, "trap '' TERM; while :; do sleep 0.05; done")
		killed, err := StopContainer(ctx, fixedResolver{ok: true}, "/pinned/x", uint32(cmd.Process.Pid), 300*time.Millisecond)
		require.NoError(t, err)
		assert.True(t, killed)
		assert.ErrorContains(t, <-done, "killed")
	})
	t.Run("not in the pod's namespace: left alone", func(t *testing.T) {
		cmd, done := start(t, "exec sleep 60")
		_, err := StopContainer(ctx, fixedResolver{ok: false}, "/pinned/x", uint32(cmd.Process.Pid), time.Second)
		require.ErrorIs(t, err, netns.ErrHostNetns)
		select {
		case <-done:
			t.Fatal("signalled a process outside the pod")
		case <-time.After(200 * time.Millisecond):
		}
	})
	t.Run("already gone", func(t *testing.T) {
		cmd, done := start(t, "exit 0")
		<-done
		killed, err := StopContainer(ctx, fixedResolver{ok: true}, "/pinned/x", uint32(cmd.Process.Pid), time.Second)
		require.NoError(t, err)
		assert.False(t, killed)
	})
}

// flakyPod is a pod pinned at /pinned/<id> asking (NPWG) for a NAD whose ADD
// fails while the returned file exists; remove it to let the ADD succeed.
func flakyPod(t *testing.T, f *attachtest.Fixture, id string) (attach.Sandbox, func()) {
	t.Helper()
	failing := filepath.Join(t.TempDir(), "fail")
	require.NoError(t, os.WriteFile(failing, nil, 0o600))
	f.NAD(plan.NADRef{Namespace: "ns1", Name: "flaky"}, "cni-flaky", map[string]any{"failOn": "ADD", "failMsg": "no leases", "failWhile": failing})
	f.Netns.Resolve(0, "/pinned/"+id)
	sb := pinnedPod(id, "/pinned/"+id)
	sb.Annotations = map[string]string{plan.AnnotationNPWGNetworks: "flaky"}
	return sb, func() { _ = os.Remove(failing) }
}

// Issue 41, item 4: a pod whose containers started without its networks
// and whose resync attach fails is not left so: the attach is retried with
// backoff until it succeeds, then the pod is reported attached and (with
// failClosed.restartStarted) its containers are restarted, now with the
// networks in place.
func TestStartedPodWhoseAttachFailsIsRetriedUntilAttached(t *testing.T) {
	f := attachtest.NewKube(t, func(c *config.Config) {
		c.FailClosed.RestartStarted = true
		c.FailClosed.RestartGrace = config.Duration(10 * time.Second)
	})
	sb, heal := flakyPod(t, f, "late")
	app, exited := sleeper(t)

	r := NewResyncer(f.Mgr, attachtest.Log())
	r.stops.base = 20 * time.Millisecond
	res := r.Sync(context.Background(), []attach.Sandbox{sb}, SyncOptions{AttachMissing: true, PidlessPods: true,
		Running: map[string][]Container{"late": {{Name: "app", Pid: uint32(app.Process.Pid)}}}})
	assert.Equal(t, 1, res.Failed)
	assert.Equal(t, 1, r.RetryingStarted(), "the failed attach of a running pod is retried")
	// A second resync (a reconnect) starts no second loop.
	r.Sync(context.Background(), []attach.Sandbox{sb}, SyncOptions{AttachMissing: true, PidlessPods: true,
		Running: map[string][]Container{"late": {{Name: "app", Pid: uint32(app.Process.Pid)}}}})
	assert.Equal(t, 1, r.RetryingStarted())
	testenv.Eventually(t, 10*time.Second, "a few failed retries", func() bool {
		return strings.Count(strings.Join(f.AttachCmds(), "\n"), "ADD cni-flaky") >= 3
	})
	select {
	case <-exited:
		t.Fatal("restarted into a pod without its networks")
	default:
	}

	heal()
	r.WaitRetries()
	rec, err := f.Mgr.Record("late")
	require.NoError(t, err, "attached by a retry")
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	r.WaitRestarts()
	select {
	case err := <-exited:
		assert.ErrorContains(t, err, "terminated", "restarted once the pod has its networks")
	case <-time.After(5 * time.Second):
		t.Fatal("the container was not stopped once the pod was attached")
	}
	got := f.Sink.Started()
	require.Len(t, got, 3, "reported by each resync, and again when attached")
	assert.False(t, got[0].Attached || got[1].Attached || got[0].Restarting || got[1].Restarting)
	assert.True(t, got[2].Attached)
	assert.True(t, got[2].Restarting)
}

// The retries end when the pod is gone (its sandbox no longer runs), and
// without restartStarted an attached pod's containers are left alone.
func TestStartedPodRetriesEndWhenThePodIsGone(t *testing.T) {
	f := attachtest.NewKube(t, nil)
	sb, _ := flakyPod(t, f, "gone")
	r := NewResyncer(f.Mgr, attachtest.Log())
	r.stops.base = 20 * time.Millisecond
	r.Sync(context.Background(), []attach.Sandbox{sb}, SyncOptions{AttachMissing: true, PidlessPods: true,
		Running: map[string][]Container{"gone": {{Name: "app", Pid: 1}}}})
	require.Equal(t, 1, r.RetryingStarted())
	f.Netns.Kill("/pinned/gone")
	r.WaitRetries()
	assert.Zero(t, r.RetryingStarted())
	_, err := f.Mgr.Record("gone")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

// Another path attaching the pod meanwhile (a new container's
// CreateContainer) ends the retries too, as attached.
func TestStartedPodAttachedElsewhereEndsTheRetries(t *testing.T) {
	f := attachtest.NewKube(t, nil)
	sb, heal := flakyPod(t, f, "other")
	r := NewResyncer(f.Mgr, attachtest.Log())
	r.stops.base = 200 * time.Millisecond
	r.Sync(context.Background(), []attach.Sandbox{sb}, SyncOptions{AttachMissing: true, PidlessPods: true,
		Running: map[string][]Container{"other": {{Name: "app", Pid: 1}}}})
	heal()
	rec, err := f.Mgr.EnsureAttached(attachtest.WithDeadline(t, time.Minute), sb, true)
	require.NoError(t, err)
	require.NotNil(t, rec)
	r.WaitRetries()
	got := f.Sink.Started()
	require.Len(t, got, 2)
	assert.True(t, got[1].Attached)
	assert.False(t, got[1].Restarting, "restartStarted is off")
}

// sleeper is a process standing for a container; exited gets its end.
func sleeper(t *testing.T) (*exec.Cmd, chan error) {
	t.Helper()
	app := exec.Command("sleep", "60")
	require.NoError(t, app.Start())
	exited := make(chan error, 1)
	go func() { exited <- app.Wait() }()
	t.Cleanup(func() { _ = app.Process.Kill() })
	return app, exited
}
