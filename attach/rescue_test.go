package attach_test

// Issue 41, item 3: a container the await hook holds fails its start at the
// hook's deadline, and a pod with restartPolicy Never (a Job) then fails for
// good. Its pod's attach must therefore never still wait for a slot at that
// deadline because other namespaces keep the slots busy: an attach a
// container waits for (Background.Urgent) runs beside the slots in time,
// unless its own namespace holds one.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// rescueFixture: two slots, one per namespace; namespaces h1, h2 and h3 each
// have a network "stuck" whose ADD fails and whose rollback DEL hangs while
// hold exists (a failed attach keeps its slot while its rollback runs: up
// to 30 s), and every namespace a quick network "quick".
func rescueFixture(t *testing.T) (*attachtest.Fixture, *attach.Background, func()) {
	t.Helper()
	hold, unhold := holdFile(t)
	kf := attachtest.NewKube(t, func(c *config.Config) { c.CNITimeout = config.Duration(time.Minute) })
	bg := kf.Mgr.Background()
	bg.SetBackgroundLimits(2, 1, 2*time.Second, time.Minute)
	bg.SetRescueMargin(100 * time.Millisecond)
	t.Cleanup(bg.WaitIdle)
	for _, ns := range []string{"h1", "h2", "h3", "victim"} {
		kf.NAD(plan.NADRef{Namespace: ns, Name: "stuck"}, "cni-stuck-"+ns,
			map[string]any{"failOn": "ADD", "failMsg": "no leases", "holdOn": "DEL", "holdWhile": hold})
		kf.NAD(plan.NADRef{Namespace: ns, Name: "quick"}, "cni-quick-"+ns, nil)
	}
	t.Cleanup(unhold) // before WaitIdle (cleanups run last first)
	return kf, bg, unhold
}

// fillSlots starts pods h1-a and h2-a, whose failed attaches keep both
// slots while their rollbacks hang.
func fillSlots(t *testing.T, bg *attach.Background) []attach.Sandbox {
	t.Helper()
	pods := []attach.Sandbox{nsPod("h1-a", "h1", "stuck", 11), nsPod("h2-a", "h2", "stuck", 12)}
	for _, sb := range pods {
		require.True(t, bg.Start(sb))
	}
	testenv.Eventually(t, 10*time.Second, "h1 and h2 to hold the slots", func() bool { return bg.Stats().Running == 2 })
	return pods
}

// awaitUntil is the await hook's wait: Urgent, then Wait, with the hook's
// deadline.
func awaitUntil(t *testing.T, bg *attach.Background, id string, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	bg.Urgent(id, deadline)
	found, err := bg.Wait(ctx, id)
	require.True(t, found, "%s had a background attach", id)
	return err
}

func TestAwaitedAttachIsRescuedFromOtherNamespacesSlots(t *testing.T) {
	kf, bg, unhold := rescueFixture(t)
	// Other namespaces hold both slots, and a third waits ahead of the
	// victim: taking its turn, the victim would wait until they end.
	hostile := []attach.Sandbox{nsPod("h1-a", "h1", "stuck", 11), nsPod("h2-a", "h2", "stuck", 12), nsPod("h3-a", "h3", "stuck", 13)}
	for _, sb := range hostile {
		require.True(t, bg.Start(sb))
	}
	testenv.Eventually(t, 10*time.Second, "h1 and h2 to hold the slots, h3 to wait", func() bool {
		st := bg.Stats()
		return st.Running == 2 && st.Waiting == 1
	})
	victim := nsPod("victim-a", "victim", "quick", 21)
	require.True(t, bg.Start(victim))

	// The hook's deadline leaves the budget, the margin and 300 ms: the
	// victim is rescued after 300 ms and attached well before the deadline.
	require.NoError(t, awaitUntil(t, bg, victim.ID, 2*time.Second+100*time.Millisecond+300*time.Millisecond),
		"the victim's container would fail to start although only other namespaces were slow")
	rec, err := kf.Store.Get(victim.ID)
	require.NoError(t, err)
	assert.Len(t, rec.Networks, 1)
	testenv.Eventually(t, 10*time.Second, "the rescued attach to give its place back", func() bool { return bg.Stats().Rescued == 0 })
	st := bg.Stats()
	assert.Equal(t, 2, st.Running, "the other namespaces kept their slots")
	assert.Equal(t, 1, st.Waiting, "h3 still waits: the rescue took no slot")

	unhold()
	stopAll(t, kf, append(hostile, victim))
}

// A namespace that holds a slot is not rescued: it waits behind its own
// attaches, as before. Only the other namespaces are protected from it.
func TestAwaitedAttachOfABusyNamespaceIsNotRescued(t *testing.T) {
	kf, bg, unhold := rescueFixture(t)
	first := fillSlots(t, bg)
	own := nsPod("h1-b", "h1", "quick", 13)
	require.True(t, bg.Start(own))
	// Urgent from 200 ms on; looked at after 1 s.
	bg.Urgent(own.ID, time.Now().Add(2*time.Second+100*time.Millisecond+200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	found, err := bg.Wait(ctx, own.ID)
	require.True(t, found)
	require.ErrorIs(t, err, attach.ErrAttachPending, "behind its own namespace's attach")
	assert.Zero(t, bg.Stats().Rescued)
	assert.Equal(t, 1, bg.Stats().Waiting)

	// Once h1's own attach ends, the urgent one gets a slot.
	unhold()
	found, err = bg.Wait(attachtest.WithDeadline(t, time.Minute), own.ID)
	assert.True(t, found)
	assert.NoError(t, err)
	stopAll(t, kf, append(first, own))
}

// Without a container waiting (no Urgent), a queued attach takes its turn
// and its wait stays bounded by BackgroundQueueWait alone: nothing runs
// beside the slots.
func TestQueuedAttachWithoutAContainerWaitsItsTurn(t *testing.T) {
	kf, bg, unhold := rescueFixture(t)
	hostile := fillSlots(t, bg)
	victim := nsPod("victim-a", "victim", "quick", 21)
	require.True(t, bg.Start(victim))
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	found, err := bg.Wait(ctx, victim.ID)
	assert.True(t, found)
	assert.ErrorIs(t, err, attach.ErrAttachPending)
	assert.Zero(t, bg.Stats().Rescued)
	unhold()
	require.NoError(t, waitBG(t, kf, victim.ID))
	stopAll(t, kf, append(hostile, victim))
}

// nri.conf's shortest hook leaves room for a rescued attach's whole budget
// and the margin before the hook's deadline.
func TestMinHookTimeoutCoversARescuedAttach(t *testing.T) {
	assert.GreaterOrEqual(t, config.MinHookTimeout, attach.BackgroundAttachBudget+attach.RescueMargin+5*time.Second)
	assert.GreaterOrEqual(t, config.DefaultHookTimeout, config.MinHookTimeout)
}
