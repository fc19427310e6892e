package hook

// Issue 18: what a hostile or broken pod can make the engine do. Each test
// failed before its fix.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// withDeadline is a request context as the runtime gives one.
func withDeadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor runs f and fails the test if it has not returned within limit:
// for calls that, broken, block forever (not a performance assertion).
func waitFor(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still blocked after %s", what, limit)
	}
}

func TestRollbackDELsOnlyWhatWasAttempted(t *testing.T) {
	f := newFixture(t, []string{"alpha", "beta", "gamma"}, map[string]map[string]any{"beta": {"failOn": "ADD"}})
	_, err := f.mgr.Attach(context.Background(), pod("sb1", 42))
	require.Error(t, err)
	assert.Equal(t, []string{"ADD alpha net1", "ADD beta net2", "DEL beta net2", "DEL alpha net1"}, f.cmds(),
		"gamma got no ADD, so no DEL")
	_, err = f.mgr.Store().Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestNoTimeLeftMeansNothingAttemptedAndNothingDELed(t *testing.T) {
	f := newFixture(t, []string{"alpha", "beta"}, nil)
	// Less than the margin left: the first ADD never starts.
	ctx := withDeadline(t, DefaultMargin/2)
	_, err := f.mgr.Attach(ctx, pod("sb1", 42))
	require.ErrorIs(t, err, cni.ErrNoTime)
	testenv.Eventually(t, 10*time.Second, "the rollback ended", func() bool {
		_, err := f.mgr.Store().Get("sb1")
		return err != nil
	})
	assert.Empty(t, f.cmds(), "no ADD ran, so no DEL either")
}

func TestSelectionOverTheNetworkLimitFailsBeforeAnything(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	f.cfg.PodSelection = true
	f.mgr = NewManager(f.cfg, f.mgr.Engine(), f.ns, f.mgr.Store(), nil)
	sb := pod("sb1", 42)
	sb.Annotations = map[string]string{AnnotationNetworks: strings.TrimSuffix(strings.Repeat("alpha,", 33), ",")}
	_, err := f.mgr.Attach(context.Background(), sb)
	require.ErrorIs(t, err, ErrLimit)
	assert.Contains(t, err.Error(), "annotation nri-cni.io/networks: 33 networks, more than limits.maxNetworksPerPod in nri.conf allows (32)")
	assert.Empty(t, f.cmds())
	_, gerr := f.mgr.Store().Get("sb1")
	assert.ErrorIs(t, gerr, state.ErrNotFound)
}

// stuckFixture: network alpha whose ADD fails while failFile exists and
// whose DEL of sandbox stuckID hangs while holdFile exists.
type stuckFixture struct {
	*fixture
	failFile, holdFile string
}

const stuckID = "a-stuck"

func newStuckFixture(t *testing.T) *stuckFixture {
	dir := t.TempDir()
	sf := &stuckFixture{failFile: filepath.Join(dir, "fail"), holdFile: filepath.Join(dir, "hold-"+stuckID)}
	sf.fixture = newFixture(t, []string{"alpha"}, map[string]map[string]any{"alpha": {
		"failOn": "ADD", "failWhile": sf.failFile, "holdOn": "DEL", "holdWhile": filepath.Join(dir, "hold-{id}")}})
	// The DEL hangs until the test releases it, not until cniTimeout.
	sf.cfg.CNITimeout = config.Duration(time.Minute)
	sf.mgr = NewManager(sf.cfg, sf.mgr.Engine(), sf.ns, sf.mgr.Store(), nil)
	require.NoError(t, os.WriteFile(sf.failFile, nil, 0o600))
	require.NoError(t, os.WriteFile(sf.holdFile, nil, 0o600))
	t.Cleanup(func() { _ = os.Remove(sf.holdFile) }) // never leave a plugin hanging
	return sf
}

// stick makes stuckID's attach fail and its rollback DEL hang; it returns
// once the attach has given up (the rollback goes on holding the sandbox).
func (sf *stuckFixture) stick(t *testing.T, pid uint32) {
	id := stuckID
	_, err := sf.mgr.Attach(withDeadline(t, time.Second), pod(id, pid))
	require.Error(t, err)
	require.NoError(t, os.Remove(sf.failFile)) // later ADDs succeed
	testenv.Eventually(t, 10*time.Second, "the rollback's DEL is running", func() bool {
		for _, c := range sf.calls() {
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

	waitFor(t, 10*time.Second, "another pod's attach", func() {
		_, err := sf.mgr.Attach(withDeadline(t, 2*time.Second), pod("b-other", 11))
		assert.NoError(t, err)
	})
	// Stop of the stuck pod answers within its deadline and leaves the
	// teardown to a retry.
	waitFor(t, 10*time.Second, "Stop of the stuck pod", func() {
		err := sf.mgr.Detach(withDeadline(t, 500*time.Millisecond), pod(stuckID, 10), false)
		assert.ErrorIs(t, err, ErrBusy)
	})
	assert.Equal(t, 1, sf.mgr.PendingTeardowns(), "the busy teardown is retried")

	// GC runs while the stuck rollback holds its pod; attaches made while
	// GC waits for its exclusive lock are not queued behind it.
	sf.ns.kill("/fake/netns/10")
	var wg sync.WaitGroup
	var res GCResult
	wg.Add(1)
	go func() { defer wg.Done(); res = sf.mgr.GC(context.Background(), nil) }()
	waitFor(t, 10*time.Second, "an attach during GC", func() {
		_, err := sf.mgr.Attach(withDeadline(t, 2*time.Second), pod("c-during-gc", 12))
		assert.NoError(t, err)
	})
	waitFor(t, 20*time.Second, "GC", wg.Wait)
	assert.GreaterOrEqual(t, res.Busy, 1, "the stuck pod (and libcni's GC) skipped this pass")

	require.NoError(t, os.Remove(sf.holdFile))
	testenv.Eventually(t, 10*time.Second, "the rollback finished", func() bool {
		_, err := sf.mgr.Store().Get(stuckID)
		return err != nil
	})
}

func TestNetnsSweepIsNotHeldByAStuckPod(t *testing.T) {
	sf := newStuckFixture(t)
	sf.stick(t, 10)
	_, err := sf.mgr.Attach(withDeadline(t, 2*time.Second), pod("d-gone", 13))
	require.NoError(t, err)
	// Both namespaces vanish; stuckID sorts first in the sweep.
	sf.ns.kill("/fake/netns/10")
	sf.ns.kill("/fake/netns/13")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, sf.mgr.WatchNetns(ctx, 50*time.Millisecond))
	testenv.Eventually(t, 10*time.Second, "d-gone released while a-stuck is stuck", func() bool {
		_, err := sf.mgr.Store().Get("d-gone")
		return err != nil
	})
	require.NoError(t, os.Remove(sf.holdFile))
}

// A record file left empty by a power loss, for a pod the runtime still
// runs: nothing of it is DELed; the record is rebuilt from libcni's cache
// (the NAD network included); when the pod is gone, both are released.
func TestUnreadableRecordFailsClosed(t *testing.T) {
	kf := newKubeFixture(t, nil)
	kf.nad(NADRef{"ns1", "blue"}, "cni-blue", nil)
	sb := npwgPod("sb1", "blue, alpha@data0")
	kf.src.set(NADRef{"ns1", "alpha"}, &cni.Network{Name: "alpha"}) // empty spec.config: confDir's alpha
	rec, err := kf.mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.Len(t, rec.Networks, 2)
	recordFile := filepath.Join(kf.cfg.StateDir, "sb1.json")
	require.NoError(t, os.WriteFile(recordFile, nil, 0o600))
	before := len(kf.cmds())

	res := kf.mgr.Sync(context.Background(), []Sandbox{sb}, SyncOptions{AttachMissing: true})
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.Repaired)
	assert.Empty(t, dels(kf.cmds()[before:]), "no DEL for a pod the runtime runs")
	got, err := kf.mgr.Store().Get("sb1")
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
	before = len(kf.cmds())
	res = kf.mgr.Sync(context.Background(), nil, SyncOptions{})
	require.NoError(t, res.Err())
	assert.ElementsMatch(t, []string{"DEL cni-blue net1", "DEL alpha data0"}, dels(kf.cmds()[before:]))
	_, err = os.Stat(recordFile)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func dels(cmds []string) []string {
	var out []string
	for _, c := range cmds {
		if strings.HasPrefix(c, "DEL ") {
			out = append(out, c)
		}
	}
	return out
}

// Attachments in libcni's shared cache that nri-cni did not make (no
// marker, a network it does not load) are never DELed by its GC; its own
// without a record are.
func TestGCLeavesForeignAttachmentsAlone(t *testing.T) {
	f := newFixture(t, []string{"alpha"}, nil)
	// Another CNI user of the same cache (a Multus delegate) on net1.
	data, err := json.Marshal(recorderNet("multus-net", f.record, nil))
	require.NoError(t, err)
	list, err := libcni.NetworkConfFromBytes(data)
	require.NoError(t, err)
	other := libcni.NewCNIConfigWithCacheDir(f.cfg.BinDirs, f.cfg.CacheDir, nil)
	_, err = other.AddNetworkList(context.Background(), list, &libcni.RuntimeConf{ContainerID: "multus-pod", NetNS: "/fake/x", IfName: "net1"})
	require.NoError(t, err)
	// And one of nri-cni's own whose record is gone.
	_, err = f.mgr.Attach(context.Background(), pod("sb1", 42))
	require.NoError(t, err)
	require.NoError(t, f.mgr.Store().Delete("sb1"))

	res := f.mgr.GC(context.Background(), nil)
	require.NoError(t, res.Err())
	assert.Equal(t, 1, res.StaleCached)
	assert.Equal(t, []string{"DEL alpha net1"}, dels(f.cmds()))
	assert.Equal(t, 1, f.cached("multus-pod"))
}

// Teardown without a record (nri-cni started after the pod, or lost it)
// DELs the pod's NetworkAttachmentDefinition networks too.
func TestTeardownWithoutRecordIncludesNADNetworks(t *testing.T) {
	kf := newKubeFixture(t, nil)
	kf.nad(NADRef{"ns1", "blue"}, "cni-blue", nil)
	sb := npwgPod("sb1", "blue, alpha@data0")
	kf.src.set(NADRef{"ns1", "alpha"}, &cni.Network{Name: "alpha"})
	_, err := kf.mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.NoError(t, kf.mgr.Store().Delete("sb1"))
	require.NoError(t, kf.mgr.Detach(context.Background(), sb, true))
	assert.ElementsMatch(t, []string{"DEL cni-blue net1", "DEL alpha data0"}, dels(kf.cmds()))
	assert.Zero(t, kf.cached("sb1"))
}

func TestMaxNetworksDefault(t *testing.T) {
	assert.Equal(t, 32, config.Default().Limits.MaxNetworksPerPod)
}

// opsObs records the network label of every operation.
type opsObs struct {
	mu     sync.Mutex
	labels map[string]int
}

func (o *opsObs) Op(_, network, _ string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.labels[network]++
}

// Tenants name NetworkAttachmentDefinitions' networks: one metrics label
// per name would grow without bound. confDir networks keep theirs.
func TestMetricsLabelsAreBounded(t *testing.T) {
	kf := newKubeFixture(t, nil)
	obs := &opsObs{labels: map[string]int{}}
	kf.mgr.SetObserver(obs)
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("tenant-net-%d", i)
		kf.nad(NADRef{"ns1", name}, name, nil)
		_, err := kf.mgr.Attach(context.Background(), npwgPod(fmt.Sprintf("sb%d", i), name))
		require.NoError(t, err)
	}
	kf.src.set(NADRef{"ns1", "alpha"}, &cni.Network{Name: "alpha"})
	_, err := kf.mgr.Attach(context.Background(), npwgPod("sb-alpha", "alpha"))
	require.NoError(t, err)
	assert.Equal(t, map[string]int{MetricsNADLabel: 5, "alpha": 1}, obs.labels)
}

// An interface name the plan needs is held in the namespace already (in
// hook mode: another container of the pod): the pod fails with nothing
// ADDed, so no rollback DEL removes the other one's interface.
func TestTakenInterfaceNameFailsBeforeAnyADD(t *testing.T) {
	f := newFixture(t, []string{"alpha", "beta"}, nil)
	f.ns.links = map[string][]string{"/fake/netns/42": {"lo", "eth0", "net2"}}
	_, err := f.mgr.Attach(context.Background(), pod("sb1", 42))
	require.ErrorIs(t, err, ErrInterfaceExists)
	assert.Contains(t, err.Error(), "network beta: interface already exists in the network namespace: net2")
	assert.Empty(t, f.cmds(), "no ADD, so no DEL of someone else's net2")
	_, gerr := f.mgr.Store().Get("sb1")
	assert.ErrorIs(t, gerr, state.ErrNotFound)
}
