package attach_test

// Issue 28, item 7: a failing hot-plug retried by kube.PodWatcher raises
// its Warning Event once per annotation value (and once when the watcher
// gives up), and a busy pod does not hold a hot-plug worker.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/plan"
)

func replugTry(kf *attachtest.Fixture, sb attach.Sandbox, value string, quiet bool, giveUp string) error {
	_, err := kf.Mgr.Replug(context.Background(), attach.PodUpdate{UID: sb.Pod.UID, Namespace: sb.Pod.Namespace, Name: sb.Pod.Name,
		Annotations: map[string]string{plan.AnnotationNPWGNetworks: value}, Changed: true, Quiet: quiet, GiveUp: giveUp})
	return err
}

func TestHotplugRetriesRaiseOneEvent(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)

	require.Error(t, replugTry(kf, sb, "net-a, broken", false, ""), "the first try")
	require.Error(t, replugTry(kf, sb, "net-a, broken", true, ""), "a retry")
	require.Error(t, replugTry(kf, sb, "net-a, broken", true, ""), "a retry")
	_, failures := kf.Sink.Snapshot()
	require.Len(t, failures, 1, "one Warning Event for the first failure, none for the retries")
	assert.Contains(t, failures[0].Err.Error(), "pool exhausted")

	const note = "hot-plug gave up on this annotation value after 3 tries"
	err = replugTry(kf, sb, "net-a, broken", false, note)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), note, "the caller's own note is for the Event")
	_, failures = kf.Sink.Snapshot()
	require.Len(t, failures, 2, "the last try's Event says it gave up")
	assert.Contains(t, failures[1].Err.Error(), "pool exhausted; "+note)

	// A refusal is a verdict of its own: reported even on a quiet retry.
	err = replugTry(kf, sb, "net-a, missing", true, "")
	require.ErrorIs(t, err, attach.ErrHotplugRefused)
	_, failures = kf.Sink.Snapshot()
	require.Len(t, failures, 3)
	assert.ErrorIs(t, failures[2].Err, attach.ErrHotplugRefused)

	// Every try rolled back its own ADDs; net-a stayed.
	assert.Equal(t, []string{"ns1/net-a@net1"}, networks(kf, "sb1"))
}

// Hot-plug is a background loop: a pod busy with another operation is
// answered ErrBusy after BackgroundLockWait (the watcher retries it), not
// waited for until the try's own timeout.
func TestHotplugDoesNotWaitForABusyPod(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	release, err := kf.Mgr.Hold(context.Background(), "sb1")
	require.NoError(t, err)
	defer release()
	attachtest.WaitFor(t, 20*time.Second, "a hot-plug of a busy pod", func() {
		ctx := attachtest.WithDeadline(t, time.Minute)
		_, err = kf.Mgr.Replug(ctx, attach.PodUpdate{UID: sb.Pod.UID, Namespace: "ns1", Name: sb.Pod.Name,
			Annotations: map[string]string{plan.AnnotationNPWGNetworks: "net-a, net-b"}, Changed: true})
	})
	require.ErrorIs(t, err, attach.ErrBusy)
	assert.False(t, errors.Is(err, attach.ErrHotplugRefused))
	_, failures := kf.Sink.Snapshot()
	assert.Empty(t, failures, "busy is no verdict on the pod: no Event")
}
