package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func pinnedPod(id, path string) attach.Sandbox {
	sb := attachtest.Pod(id, 0)
	sb.Pinned = path
	return sb
}

func TestSyncReconcilesWithTheRuntime(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	ctx := context.Background()
	for _, id := range []string{"kept", "unlisted", "stopped", "torn"} {
		_, err := f.Mgr.Attach(ctx, pinnedPod(id, "/pinned/"+id))
		require.NoError(t, err)
	}
	require.NoError(t, f.Mgr.Detach(ctx, pinnedPod("torn", "/pinned/torn"), false)) // Stop raced the resync
	f.Netns.Kill("/pinned/stopped")
	f.Netns.Resolve(0, "/pinned/new") // a pod created while nri-cni was away: its netns exists
	before := len(f.Calls())

	live := []attach.Sandbox{pinnedPod("kept", "/pinned/kept"), pinnedPod("stopped", "/pinned/stopped"),
		pinnedPod("torn", "/pinned/torn"), pinnedPod("new", "/pinned/new"), attachtest.Pod("hostnet", 0)}
	res := NewResyncer(f.Mgr, attachtest.Log()).Sync(ctx, live, SyncOptions{AttachMissing: true, PidlessPods: true})
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.Attached, "the missed pod")
	assert.Equal(t, 2, res.Kept, "kept and torn (its netns lives; Remove will drop it)")
	assert.Equal(t, 2, res.TornDown, "unlisted and stopped")

	var cmds []string
	for _, c := range f.Calls()[before:] {
		if c.Cmd != "GC" {
			cmds = append(cmds, c.Cmd+" "+c.ContainerID)
		}
	}
	assert.ElementsMatch(t, []string{"DEL unlisted", "DEL stopped", "ADD new"}, cmds, "torn is not attached again")
	for id, want := range map[string]bool{"kept": true, "torn": true, "new": true, "unlisted": false, "stopped": false} {
		_, err := f.Store.Get(id)
		assert.Equal(t, want, err == nil, id)
	}
}

// nri-cni killed mid-attach (its record still in phase adding) and
// restarted: the resync undoes the attach cut short and attaches the
// running pod again, instead of taking it for known.
func TestSyncFinishesAnAttachCutShort(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Netns.Resolve(0, "/pinned/cut")
	now := time.Now().UTC()
	require.NoError(t, f.Store.Put(&state.Record{ID: "cut", Kind: "pod", Namespace: "team", Name: "web", UID: "uid-cut",
		Netns: "/pinned/cut", Phase: state.PhaseAdding, Created: now, Updated: now,
		Networks: []state.Network{{Name: "alpha", IfName: "net1"}}}))
	res := NewResyncer(f.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{pinnedPod("cut", "/pinned/cut")},
		SyncOptions{AttachMissing: true, PidlessPods: true})
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.Attached)
	var cmds []string
	for _, c := range f.Cmds() {
		if !strings.HasPrefix(c, "GC ") {
			cmds = append(cmds, c)
		}
	}
	assert.Equal(t, []string{"DEL alpha net1", "ADD alpha net1"}, cmds)
	rec, err := f.Store.Get("cut")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)
}

// Resync attaches only sandboxes the runtime is really running. containerd
// lists a sandbox whose start failed (cleanup error) as NOTREADY after a
// restart: Pid 0, netns still pinned. It must not get an address.
func TestSyncAttachesOnlyRunningSandboxes(t *testing.T) {
	running := func(id string, pid uint32) attach.Sandbox {
		sb := pinnedPod(id, "/pinned/"+id)
		sb.Pid = pid
		return sb
	}
	for _, tt := range []struct {
		name     string
		pidless  bool
		sb       attach.Sandbox
		dead     bool // the pid is gone
		attached bool
	}{
		{name: "containerd: pause pid alive", sb: running("ready", 42), attached: true},
		{name: "containerd: pid 0 (NOTREADY, start failed)", sb: running("failed", 0)},
		{name: "containerd: pid gone, netns still pinned", sb: running("exited", 43), dead: true},
		{name: "CRI-O, infra dropped: pid 0 is normal", pidless: true, sb: running("infraless", 0), attached: true},
		{name: "CRI-O, infra kept: pid gone", pidless: true, sb: running("exited", 44), dead: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, nil)
			f.Netns.Resolve(0, tt.sb.Pinned) // its netns exists
			f.Netns.DeadPids[tt.sb.Pid] = tt.dead
			res := NewResyncer(f.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{tt.sb}, SyncOptions{AttachMissing: true, PidlessPods: tt.pidless})
			require.NoError(t, res.Err())
			_, err := f.Store.Get(tt.sb.ID)
			if tt.attached {
				assert.Equal(t, 1, res.Attached)
				assert.NoError(t, err, "recorded")
				assert.Equal(t, []string{"ADD alpha net1"}, f.AttachCmds())
				return
			}
			assert.Equal(t, 1, res.NotRunning)
			assert.Zero(t, res.Attached)
			assert.ErrorIs(t, err, state.ErrNotFound, "no record")
			assert.Empty(t, f.AttachCmds(), "no ADD or DEL")
		})
	}
}

// A host-network sandbox (its pinned path is the host's namespace) is
// skipped by resync as by RunPodSandbox, and is not counted as attached.
func TestSyncSkipsHostNetworkSandboxes(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Netns.ResolveErr = fmt.Errorf("/pinned/h %w", netns.ErrHostNetwork)
	f.Netns.Live["/pinned/h"] = netns.ID{Dev: 4, Ino: 99}
	res := NewResyncer(f.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{pinnedPod("h", "/pinned/h")}, SyncOptions{AttachMissing: true, PidlessPods: true})
	require.NoError(t, res.Err())
	assert.Zero(t, res.Attached)
	assert.Zero(t, res.Failed)
	assert.Empty(t, f.AttachCmds())
}

// Synchronize answers at once and the resync runs later: a pod attached by
// RunPodSandbox in between is not in the runtime's list, but its record is
// newer than the list, so it is kept, not torn down.
func TestSyncKeepsPodsAttachedAfterTheList(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	ctx := context.Background()
	_, err := f.Mgr.Attach(ctx, pinnedPod("old", "/pinned/old"))
	require.NoError(t, err)
	listedAt := time.Now().UTC()
	_, err = f.Mgr.Attach(ctx, pinnedPod("new", "/pinned/new")) // Run after the list was taken
	require.NoError(t, err)

	res := NewResyncer(f.Mgr, attachtest.Log()).Sync(ctx, nil, SyncOptions{ListedAt: listedAt})
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.TornDown, "old: not listed, attached before the list")
	assert.Equal(t, 1, res.Kept, "new: attached after the list")
	_, err = f.Store.Get("new")
	assert.NoError(t, err)
	assert.Equal(t, []string{"ADD alpha net1", "ADD alpha net1", "DEL alpha net1"}, f.AttachCmds())
}

func TestSyncWithoutAttachMissing(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Netns.Resolve(0, "/pinned/new")
	res := NewResyncer(f.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{pinnedPod("new", "/pinned/new")}, SyncOptions{PidlessPods: true})
	assert.Zero(t, res.Attached)
	for _, c := range f.Calls() {
		assert.NotEqual(t, "ADD", c.Cmd)
	}
}

func TestNetnsWatcherReleasesAPodWhoseNetnsVanishes(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, WatchNetns(ctx, f.Mgr, attachtest.Log(), time.Hour)) // events only: no sweep in this test
	dir := t.TempDir()
	pinned := filepath.Join(dir, "cni-1234")
	require.NoError(t, os.WriteFile(pinned, nil, 0o600))
	_, err := f.Mgr.Attach(ctx, pinnedPod("p1", pinned))
	require.NoError(t, err)

	// containerd, restarted, forgets the pod; its teardown removes the netns.
	f.Netns.Kill(pinned)
	require.NoError(t, os.Remove(pinned))
	testenv.Eventually(t, 10*time.Second, "the record to be released", func() bool {
		_, err := f.Store.Get("p1")
		return err != nil
	})
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	assert.Equal(t, "", f.Calls()[1].Netns)
}

func TestNetnsSweepCatchesWhatEventsMiss(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := f.Mgr.Attach(ctx, attachtest.Pod("c1", 5)) // hook-mode style /proc path: not watchable
	require.NoError(t, err)
	require.NoError(t, WatchNetns(ctx, f.Mgr, attachtest.Log(), 50*time.Millisecond))
	f.Netns.Kill("/fake/netns/5")
	testenv.Eventually(t, 10*time.Second, "the sweep to release it", func() bool {
		_, err := f.Store.Get("c1")
		return err != nil
	})
}

func TestConfigsReloadLive(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, WatchConfigs(ctx, f.Engine, f.ConfDir, logrus.NewEntry(logrus.New()), nil))
	testenv.WriteJSON(t, filepath.Join(f.ConfDir, "20-beta.conflist"), attachtest.RecorderNet("beta", f.Record, nil))
	require.NoError(t, os.WriteFile(filepath.Join(f.ConfDir, "30-broken.conflist"), []byte(`{"name": "half`), 0o644))
	testenv.Eventually(t, 10*time.Second, "beta to be loaded", func() bool { return len(f.Engine.Networks()) == 2 })

	// A pod attached to alpha; then alpha's config is removed: DEL still works
	// from the config libcni cached at ADD time.
	_, err := f.Mgr.Attach(ctx, attachtest.Pod("p1", 1))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(f.ConfDir, "00-alpha.conflist")))
	testenv.Eventually(t, 10*time.Second, "alpha to be unloaded", func() bool { return len(f.Engine.Networks()) == 1 })
	require.NoError(t, f.Mgr.Detach(ctx, attachtest.Pod("p1", 0), true))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	assert.Equal(t, 0, f.Cached("p1"))
}
