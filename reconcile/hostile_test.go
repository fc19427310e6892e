package reconcile

// Issue 18: what a hostile or broken pod can make the engine do. Each test
// failed before its fix.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// stuckFixture: network alpha whose ADD fails while failFile exists and
// whose DEL of sandbox stuckID hangs while holdFile exists.
type stuckFixture struct {
	*attachtest.Fixture
	failFile, holdFile string
}

const stuckID = "a-stuck"

func newStuckFixture(t *testing.T) *stuckFixture {
	dir := t.TempDir()
	sf := &stuckFixture{failFile: filepath.Join(dir, "fail"), holdFile: filepath.Join(dir, "hold-"+stuckID)}
	sf.Fixture = attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {
		"failOn": "ADD", "failWhile": sf.failFile, "holdOn": "DEL", "holdWhile": filepath.Join(dir, "hold-{id}")}})
	// The DEL hangs until the test releases it, not until cniTimeout.
	sf.Reconfigure(func(c *config.Config) { c.CNITimeout = config.Duration(time.Minute) })
	require.NoError(t, os.WriteFile(sf.failFile, nil, 0o600))
	require.NoError(t, os.WriteFile(sf.holdFile, nil, 0o600))
	t.Cleanup(func() { _ = os.Remove(sf.holdFile) }) // never leave a plugin hanging
	return sf
}

// stick makes stuckID's attach fail and its rollback DEL hang; it returns
// once the attach has given up (the rollback goes on holding the sandbox).
func (sf *stuckFixture) stick(t *testing.T, pid uint32) {
	id := stuckID
	_, err := sf.Mgr.Attach(attachtest.WithDeadline(t, time.Second), attachtest.Pod(id, pid))
	require.Error(t, err)
	require.NoError(t, os.Remove(sf.failFile)) // later ADDs succeed
	testenv.Eventually(t, 10*time.Second, "the rollback's DEL is running", func() bool {
		for _, c := range sf.Calls() {
			if c.Cmd == "DEL" && c.ContainerID == id {
				return true
			}
		}
		return false
	})
}

func TestStuckPodBlocksNoOtherPod(t *testing.T) {
	sf := newStuckFixture(t)
	sf.stick(t, 10)

	attachtest.WaitFor(t, 10*time.Second, "another pod's attach", func() {
		_, err := sf.Mgr.Attach(attachtest.WithDeadline(t, 2*time.Second), attachtest.Pod("b-other", 11))
		assert.NoError(t, err)
	})
	// Stop of the stuck pod answers within its deadline and leaves the
	// teardown to a retry.
	attachtest.WaitFor(t, 10*time.Second, "Stop of the stuck pod", func() {
		err := sf.Mgr.Detach(attachtest.WithDeadline(t, 500*time.Millisecond), attachtest.Pod(stuckID, 10), false)
		assert.ErrorIs(t, err, attach.ErrBusy)
	})
	assert.Equal(t, 1, sf.Mgr.PendingTeardowns(), "the busy teardown is retried")

	// GC runs while the stuck rollback holds its pod; attaches made while
	// GC waits for its exclusive lock are not queued behind it.
	sf.Netns.Kill("/fake/netns/10")
	var wg sync.WaitGroup
	var res GCResult
	wg.Add(1)
	go func() { defer wg.Done(); res = GC(context.Background(), sf.Mgr, nil) }()
	attachtest.WaitFor(t, 10*time.Second, "an attach during GC", func() {
		_, err := sf.Mgr.Attach(attachtest.WithDeadline(t, 2*time.Second), attachtest.Pod("c-during-gc", 12))
		assert.NoError(t, err)
	})
	attachtest.WaitFor(t, 20*time.Second, "GC", wg.Wait)
	assert.GreaterOrEqual(t, res.Busy, 1, "the stuck pod (and libcni's GC) skipped this pass")

	require.NoError(t, os.Remove(sf.holdFile))
	testenv.Eventually(t, 10*time.Second, "the rollback finished", func() bool {
		_, err := sf.Store.Get(stuckID)
		return err != nil
	})
}

func TestNetnsSweepIsNotHeldByAStuckPod(t *testing.T) {
	sf := newStuckFixture(t)
	sf.stick(t, 10)
	_, err := sf.Mgr.Attach(attachtest.WithDeadline(t, 2*time.Second), attachtest.Pod("d-gone", 13))
	require.NoError(t, err)
	// Both namespaces vanish; stuckID sorts first in the sweep.
	sf.Netns.Kill("/fake/netns/10")
	sf.Netns.Kill("/fake/netns/13")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, WatchNetns(ctx, sf.Mgr, attachtest.Log(), 50*time.Millisecond))
	testenv.Eventually(t, 10*time.Second, "d-gone released while a-stuck is stuck", func() bool {
		_, err := sf.Store.Get("d-gone")
		return err != nil
	})
	require.NoError(t, os.Remove(sf.holdFile))
}

// A record file left empty by a power loss, for a pod the runtime still
// runs: nothing of it is DELed; the record is rebuilt from libcni's cache
// (the NAD network included); when the pod is gone, both are released.
func TestUnreadableRecordFailsClosed(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "blue"}, "cni-blue", nil)
	sb := attachtest.NPWGPod("sb1", "blue, alpha@data0")
	kf.Src.Set(plan.NADRef{Namespace: "ns1", Name: "alpha"}, &cni.Network{Name: "alpha"}) // empty spec.config: confDir's alpha
	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.Len(t, rec.Networks, 2)
	recordFile := filepath.Join(kf.Cfg.StateDir, "sb1.json")
	require.NoError(t, os.WriteFile(recordFile, nil, 0o600))
	before := len(kf.Cmds())

	res := NewResyncer(kf.Mgr, attachtest.Log()).Sync(context.Background(), []attach.Sandbox{sb}, SyncOptions{AttachMissing: true})
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.Repaired)
	assert.Empty(t, attachtest.DELs(kf.Cmds()[before:]), "no DEL for a pod the runtime runs")
	got, err := kf.Store.Get("sb1")
	require.NoError(t, err, "the record is readable again")
	assert.Equal(t, state.PhaseAttached, got.Phase)
	nads := map[string]string{}
	for _, n := range got.Networks {
		nads[n.IfName] = n.NAD
	}
	assert.Equal(t, map[string]string{"net1": "ns1/blue", "data0": "ns1/alpha"}, nads)
	assert.Equal(t, "pod-sb1", got.Name)
	assert.Equal(t, "pod", got.Kind)

	// Damaged again, and the pod is gone: both networks are DELed.
	require.NoError(t, os.WriteFile(recordFile, []byte("{\"id\":"), 0o600))
	before = len(kf.Cmds())
	res = NewResyncer(kf.Mgr, attachtest.Log()).Sync(context.Background(), nil, SyncOptions{})
	require.NoError(t, res.Err())
	assert.ElementsMatch(t, []string{"DEL cni-blue net1", "DEL alpha data0"}, attachtest.DELs(kf.Cmds()[before:]))
	_, err = os.Stat(recordFile)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// Attachments in libcni's shared cache that nri-cni did not make (no
// marker, a network it does not load) are never DELed by its GC; its own
// without a record are.
func TestGCLeavesForeignAttachmentsAlone(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	// Another CNI user of the same cache (a Multus delegate) on net1.
	data, err := json.Marshal(attachtest.RecorderNet("multus-net", f.Record, nil))
	require.NoError(t, err)
	list, err := libcni.NetworkConfFromBytes(data)
	require.NoError(t, err)
	other := libcni.NewCNIConfigWithCacheDir(f.Cfg.BinDirs, f.Cfg.CacheDir, nil)
	_, err = other.AddNetworkList(context.Background(), list, &libcni.RuntimeConf{ContainerID: "multus-pod", NetNS: "/fake/x", IfName: "net1"})
	require.NoError(t, err)
	// And one of nri-cni's own whose record is gone.
	_, err = f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	require.NoError(t, f.Store.Delete("sb1"))

	res := GC(context.Background(), f.Mgr, nil)
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.StaleCached)
	assert.Equal(t, []string{"DEL alpha net1"}, attachtest.DELs(f.Cmds()))
	assert.Equal(t, 1, f.Cached("multus-pod"))
}
