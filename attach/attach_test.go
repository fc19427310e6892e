package attach_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestAttachAddsNetworksInOrderWithKubeletArgs(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, nil)
	rec, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)

	calls := f.Calls()
	require.Len(t, calls, 2)
	for i, want := range []struct{ net, ifname string }{{"alpha", "net1"}, {"beta", "net2"}} {
		c := calls[i]
		assert.Equal(t, "ADD", c.Cmd)
		assert.Equal(t, want.net, c.Network)
		assert.Equal(t, want.ifname, c.IfName)
		assert.Equal(t, "sb1", c.ContainerID)
		assert.Equal(t, "/fake/netns/42", c.Netns)
		assert.Equal(t, "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod-sb1;K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=uid-sb1", c.Args)
	}
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	assert.Equal(t, []string{"10.99.0.5/24"}, rec.Networks[0].IPs)

	stored, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, rec.Networks, stored.Networks)
	assert.Equal(t, "/fake/netns/42", stored.Netns)
	assert.Equal(t, "ns1", stored.Namespace)
	assert.Equal(t, 2, f.Cached("sb1"))
}

func TestAttachTwiceAllocatesOnce(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	_, err = f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
}

func TestConcurrentAttachSameSandboxAllocatesOnce(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("same", 7))
			assert.NoError(t, err)
		}()
	}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := f.Mgr.Attach(context.Background(), attachtest.Pod(fmt.Sprintf("other%d", i), uint32(100+i)))
			assert.NoError(t, err)
		}(i)
	}
	wg.Wait()
	adds := map[string]int{}
	for _, c := range f.Calls() {
		adds[c.ContainerID]++
	}
	assert.Equal(t, 1, adds["same"])
	assert.Len(t, adds, 9)
	assert.Equal(t, 0, f.Mgr.LocksHeld(), "locks are released")
}

func TestFailedAddRollsBackEverything(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, map[string]map[string]any{
		"beta": {"failOn": "ADD", "failMsg": "no more addresses"},
	})
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ns1/pod-sb1")
	assert.Contains(t, err.Error(), `network "beta"`)
	assert.Contains(t, err.Error(), "no more addresses")
	// The failed ADD gets its DEL too, in reverse order.
	assert.Equal(t, []string{"ADD alpha net1", "ADD beta net2", "DEL beta net2", "DEL alpha net1"}, f.Cmds())
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
	assert.Equal(t, 0, f.Cached("sb1"))
}

func TestFailedRollbackKeepsRecordForRetry(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{
		"alpha": {"failOn": "ADD,DEL"},
	})
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.Error(t, err)
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err, "the record stays so a later Stop/Remove retries the DEL")
	assert.Equal(t, state.PhaseAdding, rec.Phase)
}

func TestHangingPluginEndsBeforeTheRuntimeDeadline(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"sleep": "30s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Mgr.Attach(ctx, attachtest.Pod("sb1", 42))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timed out")
	// The chain ran under the runtime's deadline less the margin
	// (cni.Budget, whose deadline TestBudgetParentEarlier checks exactly);
	// here: the hanging plugin was cut off, not waited for. No wall-clock
	// bound near the deadline: a loaded machine delays the answer itself.
	assert.Less(t, time.Since(start), 20*time.Second, "the plugin sleeps 30 s: cut off at the deadline")
	// Rollback (DEL) runs on a fresh context even though the call timed out.
	testenv.Eventually(t, 10*time.Second, "the rollback to finish", func() bool {
		_, err := f.Store.Get("sb1")
		return errors.Is(err, state.ErrNotFound)
	})
	assert.Contains(t, f.Cmds(), "DEL alpha net1")
}

func TestResolveFailureTouchesNothing(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Netns.ResolveErr = fmt.Errorf("pid 42: %w", netns.ErrHostNetns)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.ErrorIs(t, err, netns.ErrHostNetns)
	assert.Contains(t, err.Error(), "ns1/pod-sb1")
	assert.Empty(t, f.Calls())
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestSmuggledArgsRefused(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	sb := attachtest.Pod("sb1", 42)
	sb.Pod.Name = "evil;K8S_POD_NAMESPACE=kube-system"
	_, err := f.Mgr.Attach(context.Background(), sb)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "K8S_POD_NAME")
	assert.Empty(t, f.Calls())
}

func TestUnknownNetworkIsAClearError(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Reconfigure(func(c *config.Config) { c.Networks = []string{"alpha", "missing"} })
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"missing"`)
	assert.Empty(t, f.Calls())
}

func TestBadSandboxIDRefused(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("../../etc", 42))
	require.ErrorIs(t, err, state.ErrBadID)
	require.ErrorIs(t, f.Mgr.Detach(context.Background(), attachtest.Pod("../../etc", 0), true), state.ErrBadID)
}

func TestStopDeletesInNetnsThenRemoveDropsRecord(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)

	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), false))
	calls := f.Calls()[2:]
	require.Len(t, calls, 2)
	assert.Equal(t, "DEL beta net2", calls[0].Cmd+" "+calls[0].Network+" "+calls[0].IfName)
	assert.Equal(t, "/fake/netns/42", calls[0].Netns, "DEL runs in the netns while it exists")
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseTornDown, rec.Phase)

	// Stop again: nothing to do. Remove: record dropped, no DEL.
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), false))
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	assert.Len(t, f.Calls(), 4)
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
	// Remove again: still fine.
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
}

func TestStopAfterNetnsGoneUsesEmptyNetns(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	f.Netns.Kill("/fake/netns/42") // CRI-O: the netns is gone before Stop
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), false))
	calls := f.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, "DEL", calls[1].Cmd)
	assert.Equal(t, "", calls[1].Netns)
	assert.Equal(t, 0, f.Cached("sb1"))
}

func TestRemoveWithoutStopTearsDown(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	f.Netns.Kill("/fake/netns/42")
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	assert.Equal(t, 0, f.Cached("sb1"))
}

func TestFailingDelKeepsRecordAndReturnsError(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "DEL", "failMsg": "bridge busy"}})
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	err = f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bridge busy")
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err, "kept for a retry")
	assert.Equal(t, state.PhaseAttached, rec.Phase)
}

func TestAlreadyGoneDelIsSuccess(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{
		"alpha": {"failOn": "DEL", "failMsg": "open /var/run/netns/x: no such file or directory"},
	})
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestNoRecordTearsDownOurCachedAttachmentsOnly(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	// The runtime's own attachment (eth0) in the same shared cache.
	foreign := filepath.Join(f.CacheDir, "results", "primary-sb1-eth0")
	require.NoError(t, os.WriteFile(foreign, []byte(`{"kind":"cniCacheV1","containerId":"sb1","ifName":"eth0","networkName":"primary","config":"e30="}`), 0o600))
	// nri-cni restarted without its state (plugin started after the pod).
	require.NoError(t, f.Store.Delete("sb1"))

	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	_, err = os.Stat(foreign)
	assert.NoError(t, err, "the runtime's own cache entry is left alone")
}

func TestCorruptRecordIsSkippedNotFatal(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(f.Cfg.StateDir, "sb1.json"), []byte(`{"id": "sb1", "phase`), 0o600))
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	assert.NoFileExists(t, filepath.Join(f.Cfg.StateDir, "sb1.json"))
}

// A sandbox going away (Stop): a DEL that fails in its namespace is retried
// with an empty one, which still releases IPAM, and the record is torn down
// (Remove drops it). (The
// rule that keeps a live sandbox's DEL in its namespace, teardownLive, is
// for rollbacks and hot-plug removals only.)
func TestStopRetriesAFailedDELWithAnEmptyNetns(t *testing.T) {
	failing := filepath.Join(t.TempDir(), "fail")
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {
		"failOn": "DEL", "failInNetns": true, "failMsg": "namespace busy", "failWhile": failing}})
	sb := attachtest.Pod("sb1", 42)
	_, err := f.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(failing, nil, 0o600))

	require.NoError(t, f.Mgr.Detach(context.Background(), sb, false))
	calls := f.Calls()
	require.Len(t, calls, 3, "ADD, DEL in the namespace, DEL with an empty one")
	assert.NotEmpty(t, calls[1].Netns)
	assert.Equal(t, "DEL", calls[2].Cmd)
	assert.Empty(t, calls[2].Netns)
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseTornDown, rec.Phase)
}
