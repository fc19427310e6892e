package hook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func pinnedPod(id, path string) Sandbox {
	sb := pod(id, 0)
	sb.Pinned = path
	return sb
}

func TestSyncReconcilesWithTheRuntime(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	ctx := context.Background()
	for _, id := range []string{"kept", "unlisted", "stopped", "torn"} {
		_, err := f.mgr.Attach(ctx, pinnedPod(id, "/pinned/"+id))
		require.NoError(t, err)
	}
	require.NoError(t, f.mgr.Detach(ctx, pinnedPod("torn", "/pinned/torn"), false)) // Stop raced the resync
	f.ns.kill("/pinned/stopped")
	f.ns.Resolve(0, "/pinned/new") // a pod created while nri-cni was away: its netns exists
	before := len(f.calls())

	live := []Sandbox{pinnedPod("kept", "/pinned/kept"), pinnedPod("stopped", "/pinned/stopped"),
		pinnedPod("torn", "/pinned/torn"), pinnedPod("new", "/pinned/new"), pod("hostnet", 0)}
	res := f.mgr.Sync(ctx, live, SyncOptions{AttachMissing: true, PidlessPods: true})
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.Attached, "the missed pod")
	assert.Equal(t, 2, res.Kept, "kept and torn (its netns lives; Remove will drop it)")
	assert.Equal(t, 2, res.TornDown, "unlisted and stopped")

	var cmds []string
	for _, c := range f.calls()[before:] {
		if c.Cmd != "GC" {
			cmds = append(cmds, c.Cmd+" "+c.ContainerID)
		}
	}
	assert.ElementsMatch(t, []string{"DEL unlisted", "DEL stopped", "ADD new"}, cmds, "torn is not attached again")
	for id, want := range map[string]bool{"kept": true, "torn": true, "new": true, "unlisted": false, "stopped": false} {
		_, err := f.mgr.Store().Get(id)
		assert.Equal(t, want, err == nil, id)
	}
}

// Resync attaches only sandboxes the runtime is really running. containerd
// lists a sandbox whose start failed (cleanup error) as NOTREADY after a
// restart: Pid 0, netns still pinned. It must not get an address.
func TestSyncAttachesOnlyRunningSandboxes(t *testing.T) {
	running := func(id string, pid uint32) Sandbox { sb := pinnedPod(id, "/pinned/"+id); sb.Pid = pid; return sb }
	for _, tt := range []struct {
		name     string
		pidless  bool
		sb       Sandbox
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
			f := newFixture(t, []string{"alpha"}, nil)
			f.ns.Resolve(0, tt.sb.Pinned) // its netns exists
			f.ns.deadPids[tt.sb.Pid] = tt.dead
			res := f.mgr.Sync(context.Background(), []Sandbox{tt.sb}, SyncOptions{AttachMissing: true, PidlessPods: tt.pidless})
			require.NoError(t, res.Err())
			_, err := f.mgr.Store().Get(tt.sb.ID)
			if tt.attached {
				assert.Equal(t, 1, res.Attached)
				assert.NoError(t, err, "recorded")
				assert.Equal(t, []string{"ADD alpha net1"}, f.attachCmds())
				return
			}
			assert.Equal(t, 1, res.NotRunning)
			assert.Zero(t, res.Attached)
			assert.ErrorIs(t, err, state.ErrNotFound, "no record")
			assert.Empty(t, f.attachCmds(), "no ADD or DEL")
		})
	}
}

// A host-network sandbox (its pinned path is the host's namespace) is
// skipped by resync as by RunPodSandbox, and is not counted as attached.
func TestSyncSkipsHostNetworkSandboxes(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	f.ns.resolveErr = fmt.Errorf("/pinned/h %w", netns.ErrHostNetwork)
	f.ns.live["/pinned/h"] = netns.ID{Dev: 4, Ino: 99}
	res := f.mgr.Sync(context.Background(), []Sandbox{pinnedPod("h", "/pinned/h")}, SyncOptions{AttachMissing: true, PidlessPods: true})
	require.NoError(t, res.Err())
	assert.Zero(t, res.Attached)
	assert.Zero(t, res.Failed)
	assert.Empty(t, f.attachCmds())
}

// Synchronize answers at once and the resync runs later: a pod attached by
// RunPodSandbox in between is not in the runtime's list, but its record is
// newer than the list, so it is kept, not torn down.
func TestSyncKeepsPodsAttachedAfterTheList(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	ctx := context.Background()
	_, err := f.mgr.Attach(ctx, pinnedPod("old", "/pinned/old"))
	require.NoError(t, err)
	listedAt := time.Now().UTC()
	_, err = f.mgr.Attach(ctx, pinnedPod("new", "/pinned/new")) // Run after the list was taken
	require.NoError(t, err)

	res := f.mgr.Sync(ctx, nil, SyncOptions{ListedAt: listedAt})
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.TornDown, "old: not listed, attached before the list")
	assert.Equal(t, 1, res.Kept, "new: attached after the list")
	_, err = f.mgr.Store().Get("new")
	assert.NoError(t, err)
	assert.Equal(t, []string{"ADD alpha net1", "ADD alpha net1", "DEL alpha net1"}, f.attachCmds())
}

func TestSyncWithoutAttachMissing(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	f.ns.Resolve(0, "/pinned/new")
	res := f.mgr.Sync(context.Background(), []Sandbox{pinnedPod("new", "/pinned/new")}, SyncOptions{PidlessPods: true})
	assert.Zero(t, res.Attached)
	for _, c := range f.calls() {
		assert.NotEqual(t, "ADD", c.Cmd)
	}
}

func TestNetnsWatcherReleasesAPodWhoseNetnsVanishes(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, f.mgr.WatchNetns(ctx, time.Hour)) // events only: no sweep in this test
	dir := t.TempDir()
	pinned := filepath.Join(dir, "cni-1234")
	require.NoError(t, os.WriteFile(pinned, nil, 0o600))
	_, err := f.mgr.Attach(ctx, pinnedPod("p1", pinned))
	require.NoError(t, err)

	// containerd, restarted, forgets the pod; its teardown removes the netns.
	f.ns.kill(pinned)
	require.NoError(t, os.Remove(pinned))
	testenv.Eventually(t, 10*time.Second, "the record to be released", func() bool {
		_, err := f.mgr.Store().Get("p1")
		return err != nil
	})
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.cmds())
	assert.Equal(t, "", f.calls()[1].Netns)
}

func TestNetnsSweepCatchesWhatEventsMiss(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := f.mgr.Attach(ctx, pod("c1", 5)) // hook-mode style /proc path: not watchable
	require.NoError(t, err)
	require.NoError(t, f.mgr.WatchNetns(ctx, 50*time.Millisecond))
	f.ns.kill("/fake/netns/5")
	testenv.Eventually(t, 10*time.Second, "the sweep to release it", func() bool {
		_, err := f.mgr.Store().Get("c1")
		return err != nil
	})
}

func TestConfigsReloadLive(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, WatchConfigs(ctx, f.mgr.Engine(), f.confDir, logrus.NewEntry(logrus.New()), nil))
	testenv.WriteJSON(t, filepath.Join(f.confDir, "20-beta.conflist"), recorderNet("beta", f.record, nil))
	require.NoError(t, os.WriteFile(filepath.Join(f.confDir, "30-broken.conflist"), []byte(`{"name": "half`), 0o644))
	testenv.Eventually(t, 10*time.Second, "beta to be loaded", func() bool { return len(f.mgr.Engine().Networks()) == 2 })

	// A pod attached to alpha; then alpha's config is removed: DEL still works
	// from the config libcni cached at ADD time.
	_, err := f.mgr.Attach(ctx, pod("p1", 1))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(f.confDir, "00-alpha.conflist")))
	testenv.Eventually(t, 10*time.Second, "alpha to be unloaded", func() bool { return len(f.mgr.Engine().Networks()) == 1 })
	require.NoError(t, f.mgr.Detach(ctx, pod("p1", 0), true))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.cmds())
	assert.Equal(t, 0, f.cached("p1"))
}

func TestFailurePolicyIgnore(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "ADD"}})
	f.mgr.cfg.FailurePolicy = config.FailurePolicyIgnore
	p := NewPlugin(f.mgr, nil, logrus.NewEntry(logrus.New()))
	require.NoError(t, p.RunPodSandbox(context.Background(), nriPod("sb1", "/pinned/sb1", 10)), "the pod starts")
	_, err := f.mgr.Store().Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound, "and nothing stays attached")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.cmds())
}
