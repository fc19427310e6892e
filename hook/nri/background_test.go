package nri

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// backgroundPlugin is a plugin whose engine attaches in the background,
// over networks whose plugin takes sleep to ADD ("" = at once) and fails
// when fail is set.
func backgroundPlugin(t *testing.T, sleep string, fail bool) (*attachtest.Fixture, *Plugin) {
	t.Helper()
	extra := map[string]any{}
	if sleep != "" {
		extra["sleep"] = sleep
	}
	if fail {
		extra["failOn"], extra["failMsg"] = "ADD", "no leases"
	}
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": extra})
	f.Reconfigure(func(c *config.Config) { c.BackgroundAttach = true })
	t.Cleanup(f.Mgr.Background().WaitIdle)
	return f, New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
}

// RunPodSandbox answers before the chain has run; the pod's first container
// waits for it and then finds the networks there; the next container costs
// nothing.
func TestBackgroundAttachAnswersAtOnceAndTheContainerWaits(t *testing.T) {
	f, p := backgroundPlugin(t, "300ms", false)
	pod := runningPod(f, "sb1", 10)

	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	if rec, err := f.Store.Get("sb1"); err == nil {
		assert.NotEqual(t, state.PhaseAttached, rec.Phase, "answered before the 300 ms ADD ended")
	}

	require.NoError(t, createContainer(t, p, pod))
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err, "attached by the time the first container is created")
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	require.NoError(t, createContainer(t, p, pod), "the next container")
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds(), "one ADD")
}

// A wrong request fails the sandbox at once, as in line: nothing runs in
// the background.
func TestBackgroundAttachRefusesAWrongRequestAtOnce(t *testing.T) {
	f, p := backgroundPlugin(t, "", false)
	f.Reconfigure(func(c *config.Config) { c.PodSelection, c.BackgroundAttach = true, true })
	p = New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	pod.Annotations = map[string]string{plan.AnnotationNetworks: "no-such-network"}
	err := p.RunPodSandbox(context.Background(), pod)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-network")
	f.Mgr.Background().WaitIdle()
	assert.Empty(t, f.Calls())
}

// A failed background attach is rolled back; the first container is refused
// with the attach's error; the kubelet's retry attaches in line (and fails
// the same way while the network does).
func TestBackgroundAttachFailureFailsTheContainer(t *testing.T) {
	f, p := backgroundPlugin(t, "", true)
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod), "the sandbox is not failed")
	err := createContainer(t, p, pod)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no leases")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds(), "rolled back")
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)

	err = createContainer(t, p, pod)
	require.Error(t, err, "the retry attaches again, in line")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1", "ADD alpha net1", "DEL alpha net1"}, f.Cmds())
}

// An attach slower than the container's request deadline: the container is
// refused in time (never the runtime's own deadline), the attach goes on,
// and the retry finds the networks.
func TestBackgroundAttachNotDoneByTheDeadline(t *testing.T) {
	f, p := backgroundPlugin(t, "800ms", false)
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	ctx, cancel := context.WithTimeout(context.Background(), f.Mgr.Margin()+200*time.Millisecond)
	defer cancel()
	_, _, err := p.CreateContainer(ctx, pod, nriCtr("app", "sb1"))
	require.ErrorIs(t, err, attach.ErrAttachPending)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	f.Mgr.Background().WaitIdle()
	require.NoError(t, createContainer(t, p, pod), "the kubelet's retry")
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
}

// Stop before the background attach ended: it is cancelled and waited for,
// the pod is torn down, and nothing is attached after the Stop.
func TestBackgroundAttachStoppedFirst(t *testing.T) {
	f, p := backgroundPlugin(t, "400ms", false)
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	testenv.Eventually(t, 5*time.Second, "the ADD to start", func() bool { return len(f.Calls()) > 0 || f.Mgr.LocksHeld() > 0 })
	require.NoError(t, p.StopPodSandbox(context.Background(), pod))
	require.NoError(t, p.RemovePodSandbox(context.Background(), pod))
	f.Mgr.Background().WaitIdle()
	_, err := f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound, "no record after the Stop")
	adds, dels := 0, 0
	for _, c := range f.Cmds() {
		switch c {
		case "ADD alpha net1":
			adds++
		case "DEL alpha net1":
			dels++
		}
	}
	assert.LessOrEqual(t, adds, 1)
	assert.GreaterOrEqual(t, dels, adds, "every ADD got its DEL: %v", f.Cmds())
	assert.Equal(t, 0, f.Mgr.LocksHeld())
}

// Many pods at once: their chains run side by side, not one after the
// other (the point of it: the runtime's NRI lock is not held meanwhile).
func TestBackgroundAttachRunsPodsSideBySide(t *testing.T) {
	f, p := backgroundPlugin(t, "300ms", false)
	const n = 4
	for i := range n {
		require.NoError(t, p.RunPodSandbox(context.Background(), runningPod(f, "sb"+string(rune('a'+i)), uint32(10+i))))
	}
	testenv.Eventually(t, 10*time.Second, "two pods' attaches in flight at once", func() bool {
		return f.Mgr.LocksHeld() >= 2
	})
	f.Mgr.Background().WaitIdle()
	assert.Len(t, f.Cmds(), n)
}

// After a failed background attach, the kubelet's retry attaches in the
// background too: a chain slower than the request's deadline (which an
// attach in line could never finish) is refused as pending once, goes on,
// and the next retry finds the pod attached.
func TestBackgroundAttachRetryOfASlowChain(t *testing.T) {
	failing := filepath.Join(t.TempDir(), "fail")
	require.NoError(t, os.WriteFile(failing, nil, 0o600))
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {
		"sleep": "800ms", "failOn": "ADD", "failMsg": "no leases yet", "failWhile": failing}})
	f.Reconfigure(func(c *config.Config) { c.BackgroundAttach = true })
	t.Cleanup(f.Mgr.Background().WaitIdle)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	err := createContainer(t, p, pod)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no leases yet")

	require.NoError(t, os.Remove(failing))
	ctx, cancel := context.WithTimeout(context.Background(), f.Mgr.Margin()+200*time.Millisecond)
	defer cancel()
	_, _, err = p.CreateContainer(ctx, pod, nriCtr("app", "sb1"))
	require.ErrorIs(t, err, attach.ErrAttachPending, "the retry's attach outlives the request")
	f.Mgr.Background().WaitIdle()
	require.NoError(t, createContainer(t, p, pod), "the next retry")
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1", "ADD alpha net1"}, f.Cmds())
}

// The ADD fails and so does the rollback's DEL in the pod's namespace (a
// bridge plugin killed by cniTimeout under load, whose veth is then left in
// the pod), while a DEL with an empty namespace would succeed. The sandbox
// lives on, so the empty-netns DEL must not count as the rollback: it would
// release the address and forget the interface, and every later attach of
// the pod would fail on it ("interface already exists"). The record stays;
// the next attempt DELs in the namespace first, then ADDs.
func TestBackgroundRollbackDELsInTheLiveNamespace(t *testing.T) {
	failing := filepath.Join(t.TempDir(), "fail")
	require.NoError(t, os.WriteFile(failing, nil, 0o600))
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {
		"failOn": "ADD,DEL", "failInNetns": true, "failMsg": "timed out", "failWhile": failing}})
	f.Reconfigure(func(c *config.Config) { c.BackgroundAttach = true })
	t.Cleanup(f.Mgr.Background().WaitIdle)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	require.Error(t, createContainer(t, p, pod))
	for _, c := range f.Calls() {
		assert.NotEmpty(t, c.Netns, "no %s with an empty netns while the pod's namespace lives", c.Cmd)
	}
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err, "the record stays for the retry")
	assert.Equal(t, state.PhaseAdding, rec.Phase)

	require.NoError(t, os.Remove(failing))
	require.NoError(t, createContainer(t, p, pod))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1", "DEL alpha net1", "ADD alpha net1"}, f.Cmds(),
		"the failed rollback, then the retry: DEL in the namespace, ADD")
	rec, err = f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)
}

// With MultiNetworkPolicy on, the pod's first container waits for its
// rules too: while they are being programmed (before any ADD) it is
// refused in time, and it is created once they are in place and the
// networks attached.
func TestBackgroundAttachNoContainerBeforeTheRules(t *testing.T) {
	f, _ := backgroundPlugin(t, "", false)
	f.WithPolicy()
	t.Cleanup(f.Mgr.Background().WaitIdle)
	block := make(chan struct{})
	f.Firewall.Block = block
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))

	ctx, cancel := context.WithTimeout(context.Background(), f.Mgr.Margin()+200*time.Millisecond)
	defer cancel()
	_, _, err := p.CreateContainer(ctx, pod, nriCtr("app", "sb1"))
	require.ErrorIs(t, err, attach.ErrAttachPending, "no container while the rules are not programmed")
	assert.Empty(t, f.Cmds(), "no ADD before the rules")
	close(block)
	require.NoError(t, createContainer(t, p, pod), "the kubelet's retry")
	calls := f.Firewall.Applied()
	require.Len(t, calls, 3, "closed before the ADD, the full rules beside it, again with the pod's addresses")
	assert.Empty(t, calls[0].Seen, "the closed table before the ADD")
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
}
