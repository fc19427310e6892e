package attach_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
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

// nsPod is a pod sandbox of namespace ns asking for the NPWG networks
// annotation (its own pid, so its own fake namespace).
func nsPod(id, ns, annotation string, pid uint32) attach.Sandbox {
	sb := attachtest.NPWGPod(id, annotation)
	sb.Pod.Namespace, sb.Pid = ns, pid
	return sb
}

// holdFile makes a file the recording plugin waits on while it exists
// (holdOn/holdWhile); the returned func removes it (idempotent).
func holdFile(t *testing.T) (path string, unhold func()) {
	path = filepath.Join(t.TempDir(), "hold")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	unhold = func() { _ = os.Remove(path) }
	t.Cleanup(unhold)
	return path, unhold
}

// waitBG waits for sb's background attach (a generous request deadline).
func waitBG(t *testing.T, kf *attachtest.Fixture, id string) error {
	t.Helper()
	found, err := kf.Mgr.Background().Wait(attachtest.WithDeadline(t, time.Minute), id)
	require.True(t, found, "%s had a background attach", id)
	return err
}

// The wait for a slot is not the pod's budget: with one slot, a pod queued
// behind another's 2 s chain still has its whole budget (3 s) for its own
// 2 s chain. (Its budget starting at Start, it failed: 3 s from the start
// ended 1 s into its ADD.)
func TestBackgroundWaitForASlotIsNotPartOfTheBudget(t *testing.T) {
	const sleep = 2 * time.Second
	kf := attachtest.NewKube(t, func(c *config.Config) { c.CNITimeout = config.Duration(3 * sleep) })
	bg := kf.Mgr.Background()
	bg.SetBackgroundLimits(1, 1, sleep+time.Second, time.Minute)
	t.Cleanup(bg.WaitIdle)
	for _, ns := range []string{"team-a", "team-b"} {
		kf.NAD(plan.NADRef{Namespace: ns, Name: "slow"}, "cni-slow-"+ns, map[string]any{"sleep": sleep.String()})
	}
	a, b := nsPod("sb-a", "team-a", "slow", 11), nsPod("sb-b", "team-b", "slow", 12)
	require.True(t, bg.Start(a))
	testenv.Eventually(t, 10*time.Second, "a's attach to hold the slot", func() bool { return bg.Stats().Running == 1 })
	require.True(t, bg.Start(b))
	require.False(t, bg.Start(b), "one per sandbox, queued or not")
	require.NoError(t, waitBG(t, kf, "sb-a"))
	require.NoError(t, waitBG(t, kf, "sb-b"), "b's budget started when it had the slot")
	for _, id := range []string{"sb-a", "sb-b"} {
		rec, err := kf.Store.Get(id)
		require.NoError(t, err)
		assert.Equal(t, state.PhaseAttached, rec.Phase)
	}
	assert.Equal(t, []string{"ADD cni-slow-team-a net1", "ADD cni-slow-team-b net1"}, kf.Cmds(), "one after the other")
}

// The wait for a slot is bounded apart: past it the attach fails with
// ErrNoAttachSlot, saying how busy the slots were, on the pod (its Warning
// Event) and to its container; nothing was attempted. While it waits, a
// container's request is told it is queued.
func TestBackgroundWaitForASlotIsBoundedAndReported(t *testing.T) {
	hold, unhold := holdFile(t)
	kf := attachtest.NewKube(t, func(c *config.Config) { c.CNITimeout = config.Duration(time.Minute) })
	bg := kf.Mgr.Background()
	bg.SetBackgroundLimits(1, 1, time.Minute, 500*time.Millisecond)
	t.Cleanup(bg.WaitIdle)
	kf.NAD(plan.NADRef{Namespace: "team-a", Name: "stuck"}, "cni-stuck", map[string]any{"holdOn": "ADD", "holdWhile": hold})
	kf.NAD(plan.NADRef{Namespace: "team-b", Name: "quick"}, "cni-quick", nil)
	require.True(t, bg.Start(nsPod("sb-a", "team-a", "stuck", 11)))
	testenv.Eventually(t, 10*time.Second, "a's attach to hold the slot", func() bool { return len(kf.Calls()) == 1 })
	require.True(t, bg.Start(nsPod("sb-b", "team-b", "quick", 12)))

	found, err := bg.Wait(attachtest.WithDeadline(t, attach.DefaultMargin+100*time.Millisecond), "sb-b")
	require.True(t, found)
	require.ErrorIs(t, err, attach.ErrAttachPending)
	assert.Contains(t, err.Error(), "queued")
	assert.Contains(t, err.Error(), "for one of the node's 1 attach slots")

	err = waitBG(t, kf, "sb-b")
	require.ErrorIs(t, err, attach.ErrNoAttachSlot)
	assert.Contains(t, err.Error(), "pod team-b/pod-sb-b")
	assert.Contains(t, err.Error(), "waited 500ms; 1 of the node's 1 attach slots busy")
	_, failures := kf.Sink.Snapshot()
	require.Len(t, failures, 1, "a Warning Event on the pod")
	assert.Equal(t, "pod-sb-b", failures[0].Name)
	assert.ErrorIs(t, failures[0].Err, attach.ErrNoAttachSlot)
	assert.Equal(t, attach.BackgroundStats{Slots: 1, Share: 1, Running: 1}, bg.Stats(), "it left the queue")

	unhold()
	require.NoError(t, waitBG(t, kf, "sb-a"))
	assert.Equal(t, []string{"ADD cni-stuck net1"}, kf.Cmds(), "b attempted nothing")
}

// A Stop while the attach waits for a slot takes it out of the queue at
// once: the sandbox is never attached.
func TestBackgroundStopWhileQueued(t *testing.T) {
	hold, unhold := holdFile(t)
	kf := attachtest.NewKube(t, func(c *config.Config) { c.CNITimeout = config.Duration(time.Minute) })
	bg := kf.Mgr.Background()
	bg.SetBackgroundLimits(1, 1, time.Minute, time.Minute)
	t.Cleanup(bg.WaitIdle)
	kf.NAD(plan.NADRef{Namespace: "team-a", Name: "stuck"}, "cni-stuck", map[string]any{"holdOn": "ADD", "holdWhile": hold})
	kf.NAD(plan.NADRef{Namespace: "team-b", Name: "quick"}, "cni-quick", nil)
	require.True(t, bg.Start(nsPod("sb-a", "team-a", "stuck", 11)))
	testenv.Eventually(t, 10*time.Second, "a's attach to hold the slot", func() bool { return len(kf.Calls()) == 1 })
	b := nsPod("sb-b", "team-b", "quick", 12)
	require.True(t, bg.Start(b))
	testenv.Eventually(t, 10*time.Second, "b to queue", func() bool { return bg.Stats().Waiting == 1 })
	attachtest.WaitFor(t, 10*time.Second, "the Stop of a queued pod", func() {
		require.NoError(t, kf.Mgr.Detach(attachtest.WithDeadline(t, 2*time.Second), b, true))
	})
	assert.Equal(t, 0, bg.Stats().Waiting)
	unhold()
	require.NoError(t, waitBG(t, kf, "sb-a"))
	bg.WaitIdle()
	assert.Equal(t, []string{"ADD cni-stuck net1"}, kf.Cmds(), "b was never attached")
	_, err := kf.Store.Get("sb-b")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

// A failed attach whose rollback outlives its budget keeps its slot until
// the rollback ends: a namespace's failing attaches hold no more of the
// node's CNI work than its share.
func TestBackgroundRollbackKeepsTheSlot(t *testing.T) {
	hold, unhold := holdFile(t)
	kf := attachtest.NewKube(t, func(c *config.Config) { c.CNITimeout = config.Duration(time.Minute) })
	bg := kf.Mgr.Background()
	bg.SetBackgroundLimits(1, 1, time.Second, time.Minute)
	t.Cleanup(bg.WaitIdle)
	kf.NAD(plan.NADRef{Namespace: "team-a", Name: "broken"}, "cni-broken",
		map[string]any{"failOn": "ADD", "failMsg": "no leases", "holdOn": "DEL", "holdWhile": hold})
	require.True(t, bg.Start(nsPod("sb-a", "team-a", "broken", 11)))
	err := waitBG(t, kf, "sb-a")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no leases")
	assert.Equal(t, 1, bg.Stats().Running, "the rollback's DEL still runs: the slot is kept")
	unhold()
	testenv.Eventually(t, 10*time.Second, "the slot to come free with the rollback's end", func() bool {
		return bg.Stats().Running == 0
	})
	assert.Equal(t, []string{"ADD cni-broken net1", "DEL cni-broken net1"}, kf.Cmds())
}
