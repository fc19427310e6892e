package attach_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// fakeCNI is an attach.CNI in memory: every ADD gets 10.1.0.<n>/24, and
// the calls are kept as "CMD network ifname".
type fakeCNI struct {
	mu    sync.Mutex
	nets  []*cni.Network
	calls []string
}

func newFakeCNI(t *testing.T, names ...string) *fakeCNI {
	f := &fakeCNI{}
	for _, n := range names {
		list, err := libcni.ConfListFromBytes(fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"fake"}]}`, n))
		require.NoError(t, err)
		f.nets = append(f.nets, &cni.Network{Name: n, File: "/fake/" + n + ".conflist", List: list})
	}
	return f
}

func (f *fakeCNI) record(cmd, network, ifname string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, cmd+" "+network+" "+ifname)
	return len(f.calls)
}

func (f *fakeCNI) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeCNI) Networks() []*cni.Network              { return f.nets }
func (f *fakeCNI) FindPlugin(typ string) (string, error) { return "/fake/bin/" + typ, nil }
func (f *fakeCNI) Add(_ context.Context, n *cni.Network, a cni.Attachment) (*cni.Result, error) {
	i := f.record("ADD", n.Name, a.IfName)
	return &cni.Result{IPs: []string{fmt.Sprintf("10.1.0.%d/24", i)}}, nil
}
func (f *fakeCNI) DelFallback(_ context.Context, name string, _ *cni.Network, a cni.Attachment) error {
	f.record("DEL", name, a.IfName)
	return nil
}
func (f *fakeCNI) Check(context.Context, string, cni.Attachment) error           { return nil }
func (f *fakeCNI) Status(context.Context, *cni.Network) error                    { return nil }
func (f *fakeCNI) GC(context.Context, *cni.Network, []types.GCAttachment) error  { return nil }
func (f *fakeCNI) CachedAttachments(string) ([]*libcni.NetworkAttachment, error) { return nil, nil }
func (f *fakeCNI) CachedResult(*libcni.NetworkAttachment) (*cni.Result, error) {
	return nil, errors.New("no cache")
}

// memRecords is an attach.Records in memory; putErr, if set, fails every
// Put of an attached record.
type memRecords struct {
	mu     sync.Mutex
	recs   map[string]state.Record
	putErr error
}

func (m *memRecords) Get(id string) (*state.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[id]
	if !ok {
		return nil, fmt.Errorf("record %s: %w", id, state.ErrNotFound)
	}
	return &r, nil
}

func (m *memRecords) Put(rec *state.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.putErr != nil && rec.Phase == state.PhaseAttached {
		return m.putErr
	}
	m.recs[rec.ID] = *rec
	return nil
}

func (m *memRecords) Delete(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, id)
	return nil
}

func (m *memRecords) List() ([]*state.Record, []error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*state.Record
	for _, r := range m.recs {
		out = append(out, &r)
	}
	return out, nil
}

func (m *memRecords) Modified(string) (time.Time, error) { return time.Now(), nil }

// The Manager runs over any CNI runtime and record store: the seams its
// Deps declare. A failed record write rolls the ADDs back.
func TestManagerOverItsOwnInterfaces(t *testing.T) {
	cfg := config.Default()
	cfg.Networks = []string{"alpha", "beta"}
	engine, store := newFakeCNI(t, "alpha", "beta"), &memRecords{recs: map[string]state.Record{}}
	mgr := attach.New(cfg, attach.Deps{Engine: engine, Store: store, Netns: attachtest.NewNetns()})

	rec, err := mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	assert.Equal(t, []string{"ADD alpha net1", "ADD beta net2"}, engine.Calls())
	stored, err := mgr.Record("sb1")
	require.NoError(t, err)
	assert.Equal(t, []string{"10.1.0.2/24"}, stored.Networks[1].IPs)

	require.NoError(t, mgr.Detach(context.Background(), attachtest.Pod("sb1", 42), true))
	assert.Equal(t, []string{"ADD alpha net1", "ADD beta net2", "DEL beta net2", "DEL alpha net1"}, engine.Calls())
	_, err = mgr.Record("sb1")
	require.ErrorIs(t, err, state.ErrNotFound)

	engine.calls, store.putErr = nil, errors.New("disk full")
	_, err = mgr.Attach(context.Background(), attachtest.Pod("sb2", 43))
	require.ErrorContains(t, err, "disk full")
	assert.Equal(t, []string{"ADD alpha net1", "ADD beta net2", "DEL beta net2", "DEL alpha net1"}, engine.Calls(),
		"the ADDs are rolled back")
}
