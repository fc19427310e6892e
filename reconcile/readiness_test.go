package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// readinessObs records what a ReadinessObserver is told.
type readinessObs struct {
	mu     sync.Mutex
	ready  map[string]bool
	checks map[string]int
}

func (o *readinessObs) Op(string, string, string, time.Duration) {}
func (o *readinessObs) NetworkReady(n string, ready bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ready[n] = ready
}
func (o *readinessObs) CheckFailed(n string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.checks[n]++
}

// driftSink is a status sink that also takes drift reports.
type driftSink struct {
	attachtest.Sink
	mu    sync.Mutex
	drift []attach.AttachFailure
}

func (s *driftSink) CheckFailed(f attach.AttachFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drift = append(s.drift, f)
}

func TestNotReadyNetworkFailsPodsAtOnce(t *testing.T) {
	root := t.TempDir()
	down := filepath.Join(root, "daemon-down")
	f := attachtest.New(t, []string{"alpha", "old"}, map[string]map[string]any{
		"alpha": {"failOn": "STATUS", "failWhile": down, "failMsg": "macvlan daemon not running"},
	})
	// "old" speaks CNI 1.0.0: never asked, always ready.
	old := attachtest.RecorderNet("old", f.Record, nil)
	old["cniVersion"] = "1.0.0"
	testenv.WriteJSON(t, filepath.Join(f.ConfDir, "01-old.conflist"), old)
	_, err := f.Engine.Reload(context.Background())
	require.NoError(t, err)
	obs := &readinessObs{ready: map[string]bool{}, checks: map[string]int{}}
	f.Mgr.SetObserver(obs)

	require.NoError(t, os.WriteFile(down, nil, 0o600))
	got := CheckReadiness(context.Background(), f.Mgr, attachtest.Log())
	require.Len(t, got, 2)
	assert.Equal(t, "alpha", got[0].Network)
	assert.False(t, got[0].Ready)
	assert.Contains(t, got[0].Reason, "macvlan daemon not running")
	assert.True(t, got[1].Ready, "a config older than CNI 1.1.0 is ready")
	assert.Equal(t, map[string]bool{"alpha": false, "old": true}, obs.ready)

	_, err = f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.Error(t, err)
	assert.ErrorIs(t, err, plan.ErrNetworkNotReady)
	assert.Contains(t, err.Error(), "macvlan daemon not running", "the plugin's message")
	assert.Equal(t, []string{"STATUS alpha "}, f.Cmds(), "no ADD at all; old was never asked")
	_, err = f.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound, "nothing recorded")

	require.NoError(t, os.Remove(down))
	CheckReadiness(context.Background(), f.Mgr, attachtest.Log())
	assert.Equal(t, map[string]bool{"alpha": true, "old": true}, obs.ready)
	_, err = f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
}

func TestDriftCheckReportsWithoutRepair(t *testing.T) {
	root := t.TempDir()
	drifted := filepath.Join(root, "drifted")
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{
		"alpha": {"failOn": "CHECK", "failWhile": drifted, "failMsg": "interface net1 not found"},
	})
	sink := &driftSink{}
	d := f.Deps()
	d.Sink = sink
	f.Mgr = attach.New(f.Cfg, d)
	obs := &readinessObs{ready: map[string]bool{}, checks: map[string]int{}}
	f.Mgr.SetObserver(obs)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)

	res := CheckAttachments(context.Background(), f.Mgr)
	assert.Equal(t, CheckResult{Checked: 1}, res)
	assert.Empty(t, sink.drift)

	require.NoError(t, os.WriteFile(drifted, nil, 0o600))
	res = CheckAttachments(context.Background(), f.Mgr)
	assert.Equal(t, CheckResult{Checked: 1, Failed: 1}, res)
	require.Len(t, sink.drift, 1)
	assert.Equal(t, "alpha", sink.drift[0].Network)
	assert.Contains(t, sink.drift[0].Err.Error(), "interface net1 not found")
	assert.Equal(t, 1, obs.checks["alpha"])
	assert.Equal(t, []string{"ADD alpha net1", "CHECK alpha net1", "CHECK alpha net1"}, f.Cmds(), "CHECK only: nothing re-added")

	// A pod busy with another operation is skipped, not waited for.
	unlock, err := f.Mgr.Hold(context.Background(), "sb1")
	require.NoError(t, err)
	res = CheckAttachments(context.Background(), f.Mgr)
	unlock()
	assert.Equal(t, CheckResult{Busy: 1}, res)
}

// The drift round also compares each pod's MultiNetworkPolicy table marker
// with its record: a flushed table is reprogrammed (the rules, unlike an
// attachment, are ours to repair) and counted as drift; the attachment
// itself is only CHECKed.
func TestDriftCheckReprogramsMultiNetworkPolicy(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil).WithPolicy()
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)
	want := f.Firewall.Table("/fake/netns/42")
	require.NotEmpty(t, want)

	assert.Equal(t, CheckResult{Checked: 1}, CheckAttachments(context.Background(), f.Mgr))
	f.Firewall.SetTable("/fake/netns/42", "")
	assert.Equal(t, CheckResult{Checked: 1, Failed: 1}, CheckAttachments(context.Background(), f.Mgr))
	assert.Equal(t, want, f.Firewall.Table("/fake/netns/42"), "reprogrammed")
	assert.Equal(t, CheckResult{Checked: 1}, CheckAttachments(context.Background(), f.Mgr))
	assert.Equal(t, []string{"ADD alpha net1", "CHECK alpha net1", "CHECK alpha net1", "CHECK alpha net1"}, f.Cmds(), "nothing re-added")
}
