package attach_test

// Issue 18: what a hostile or broken pod can make the engine do. Each test
// failed before its fix.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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

func TestRollbackDELsOnlyWhatWasAttempted(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta", "gamma"}, map[string]map[string]any{"beta": {"failOn": "ADD"}})
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.Error(t, err)
	assert.Equal(t, []string{"ADD alpha net1", "ADD beta net2", "DEL beta net2", "DEL alpha net1"}, f.Cmds(),
		"gamma got no ADD, so no DEL")
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestNoTimeLeftMeansNothingAttemptedAndNothingDELed(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, nil)
	// Less than the margin left: the first ADD never starts.
	ctx := attachtest.WithDeadline(t, attach.DefaultMargin/2)
	_, err := f.Mgr.Attach(ctx, attachtest.Pod("sb1", 42))
	require.ErrorIs(t, err, cni.ErrNoTime)
	testenv.Eventually(t, 10*time.Second, "the rollback ended", func() bool {
		_, err := f.Store.Get("sb1")
		return err != nil
	})
	assert.Empty(t, f.Cmds(), "no ADD ran, so no DEL either")
}

func TestSelectionOverTheNetworkLimitFailsBeforeAnything(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Reconfigure(func(c *config.Config) { c.PodSelection = true })
	sb := attachtest.Pod("sb1", 42)
	sb.Annotations = map[string]string{plan.AnnotationNetworks: strings.TrimSuffix(strings.Repeat("alpha,", 33), ",")}
	_, err := f.Mgr.Attach(context.Background(), sb)
	require.ErrorIs(t, err, plan.ErrLimit)
	assert.Contains(t, err.Error(), "annotation nri-cni.io/networks: 33 networks, more than limits.maxNetworksPerPod in nri.conf allows (32)")
	assert.Empty(t, f.Cmds())
	_, gerr := f.Store.Get("sb1")
	assert.ErrorIs(t, gerr, state.ErrNotFound)
}

// Teardown without a record (nri-cni started after the pod, or lost it)
// DELs the pod's NetworkAttachmentDefinition networks too.
func TestTeardownWithoutRecordIncludesNADNetworks(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "blue"}, "cni-blue", nil)
	sb := attachtest.NPWGPod("sb1", "blue, alpha@data0")
	kf.Src.Set(plan.NADRef{Namespace: "ns1", Name: "alpha"}, &cni.Network{Name: "alpha"})
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	require.NoError(t, kf.Store.Delete("sb1"))
	require.NoError(t, kf.Mgr.Detach(context.Background(), sb, true))
	assert.ElementsMatch(t, []string{"DEL cni-blue net1", "DEL alpha data0"}, attachtest.DELs(kf.Cmds()))
	assert.Zero(t, kf.Cached("sb1"))
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
	kf := attachtest.NewKube(t, nil)
	obs := &opsObs{labels: map[string]int{}}
	kf.Mgr.SetObserver(obs)
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("tenant-net-%d", i)
		kf.NAD(plan.NADRef{Namespace: "ns1", Name: name}, name, nil)
		_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod(fmt.Sprintf("sb%d", i), name))
		require.NoError(t, err)
	}
	kf.Src.Set(plan.NADRef{Namespace: "ns1", Name: "alpha"}, &cni.Network{Name: "alpha"})
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb-alpha", "alpha"))
	require.NoError(t, err)
	assert.Equal(t, map[string]int{attach.MetricsNADLabel: 5, "alpha": 1}, obs.labels)
}

// An interface name the plan needs is held in the namespace already (in
// hook mode: another container of the pod): the pod fails with nothing
// ADDed, so no rollback DEL removes the other one's interface.
func TestTakenInterfaceNameFailsBeforeAnyADD(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, nil)
	f.Netns.LinksIn = map[string][]string{"/fake/netns/42": {"lo", "eth0", "net2"}}
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.ErrorIs(t, err, attach.ErrInterfaceExists)
	assert.Contains(t, err.Error(), "network beta: interface already exists in the network namespace: net2")
	assert.Empty(t, f.Cmds(), "no ADD, so no DEL of someone else's net2")
	_, gerr := f.Store.Get("sb1")
	assert.ErrorIs(t, gerr, state.ErrNotFound)
}
