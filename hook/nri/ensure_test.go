package nri

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func nriCtr(name, pod string) *api.Container {
	return &api.Container{Id: "ctr-" + name, PodSandboxId: pod, Name: name}
}

// runningPod is an NRI pod whose pinned netns exists and whose pid is alive
// in it (what containerd hands CreateContainer for a ready sandbox).
func runningPod(f *attachtest.Fixture, id string, pid uint32) *api.PodSandbox {
	pinned := "/pinned/" + id
	_, err := f.Netns.Resolve(pid, pinned)
	require.NoError(f.T, err)
	return nriPod(id, pinned, pid)
}

func createContainer(t *testing.T, p *Plugin, pod *api.PodSandbox) error {
	t.Helper()
	adjust, updates, err := p.CreateContainer(context.Background(), pod, nriCtr("app", pod.GetId()))
	assert.Nil(t, adjust, "never adjusts the container")
	assert.Nil(t, updates)
	return err
}

func TestCreateContainerEnsuresTheAttachment(t *testing.T) {
	for _, tc := range []struct {
		name     string
		runFirst bool
		want     []string
	}{
		{"attached by Run: no CNI call", true, []string{"ADD alpha net1"}},
		{"created while away: attached once", false, []string{"ADD alpha net1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, nil)
			p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
			pod := runningPod(f, "sb1", 10)
			if tc.runFirst {
				require.NoError(t, p.RunPodSandbox(context.Background(), pod))
			}
			for i := 0; i < 3; i++ { // every container of the pod
				require.NoError(t, createContainer(t, p, pod))
			}
			assert.Equal(t, tc.want, f.Cmds())
			rec, err := f.Store.Get("sb1")
			require.NoError(t, err)
			assert.Equal(t, state.PhaseAttached, rec.Phase)
			assert.Equal(t, "/pinned/sb1", f.Calls()[0].Netns)
		})
	}
}

// Pods nri-cni leaves alone cost no CNI call, no record and no error.
func TestCreateContainerLeavesOthersAlone(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	f.Reconfigure(func(c *config.Config) { c.PodSelection, c.RequireAnnotation = true, true })
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	require.NoError(t, createContainer(t, p, runningPod(f, "plain", 10)), "not asking for networks")
	require.NoError(t, createContainer(t, p, nriPod("host", "", 10)), "host network")
	torn := runningPod(f, "torn", 11) // stopped meanwhile: a record in phase torn-down
	torn.Annotations = map[string]string{plan.AnnotationNetworks: "alpha"}
	require.NoError(t, p.RunPodSandbox(context.Background(), torn))
	require.NoError(t, p.StopPodSandbox(context.Background(), torn))
	require.NoError(t, createContainer(t, p, torn), "a known pod is never attached again")
	assert.Equal(t, []string{"ADD alpha net1", "DEL alpha net1"}, f.Cmds())
	_, err := f.Store.Get("plain")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestCreateContainerFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policy   string
		wantErr  bool
		wantCmds []string
	}{
		{"failurePolicy fail: the container is not created", config.FailurePolicyFail, true, []string{"ADD alpha net1", "DEL alpha net1"}},
		{"failurePolicy ignore: not on the container path", config.FailurePolicyIgnore, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"failOn": "ADD", "failMsg": "no leases"}})
			f.Reconfigure(func(c *config.Config) { c.FailurePolicy = tc.policy })
			p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
			err := createContainer(t, p, runningPod(f, "sb1", 10))
			if tc.wantErr {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "no leases")
				assert.Contains(t, err.Error(), "team/web")
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.wantCmds, f.Cmds(), "rolled back")
			_, err = f.Store.Get("sb1")
			assert.ErrorIs(t, err, state.ErrNotFound)
		})
	}
}

// A sandbox the runtime is not running (its pid gone) is never attached.
func TestCreateContainerRefusesASandboxNotRunning(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	f.Netns.Mu.Lock()
	f.Netns.DeadPids[10] = true
	f.Netns.Mu.Unlock()
	err := createContainer(t, p, pod)
	require.ErrorIs(t, err, attach.ErrNotRunning)
	assert.Empty(t, f.Calls())
}

// Run (the runtime), the resync and CreateContainer racing on one pod: one ADD.
func TestConcurrentRunResyncCreateContainerAddOnce(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"sleep": "100ms"}})
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	sb, _ := sandboxOf(pod)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(3)
		go func() { defer wg.Done(); assert.NoError(t, p.RunPodSandbox(ctx, pod)) }()
		go func() { defer wg.Done(); assert.NoError(t, createContainer(t, p, pod)) }()
		go func() {
			defer wg.Done()
			_, err := f.Mgr.AttachIfAbsent(ctx, sb)
			if !errors.Is(err, attach.ErrKnown) {
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
	assert.Equal(t, 0, f.Mgr.LocksHeld())
}

// Another operation holding the pod (the resync's GC, an attach) past the
// request's deadline: ErrBusy before the deadline, never the runtime's
// DeadlineExceeded (containerd would drop nri-cni), and nothing attached;
// the retry attaches.
func TestCreateContainerAnswersInTimeWhenBusy(t *testing.T) {
	for _, holder := range []string{"gc", "sandbox"} {
		t.Run(holder, func(t *testing.T) {
			f := attachtest.New(t, []string{"alpha"}, nil)
			p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
			pod := runningPod(f, "sb1", 10)
			var release func()
			if holder == "gc" {
				release = f.Mgr.HoldGC(context.Background(), time.Second)
			} else {
				var err error
				release, err = f.Mgr.Hold(context.Background(), "sb1")
				require.NoError(t, err)
			}
			require.NotNil(t, release)
			ctx, cancel := context.WithTimeout(context.Background(), f.Mgr.Margin()+300*time.Millisecond)
			defer cancel()
			_, _, err := p.CreateContainer(ctx, pod, nriCtr("app", "sb1"))
			require.ErrorIs(t, err, attach.ErrBusy)
			assert.NotErrorIs(t, err, context.DeadlineExceeded)
			release()
			assert.Empty(t, f.Calls())

			require.NoError(t, createContainer(t, p, pod), "the kubelet's retry")
			assert.Equal(t, []string{"ADD alpha net1"}, f.Cmds())
			testenv.Eventually(t, 10*time.Second, "the abandoned wait to release its lock", func() bool {
				return f.Mgr.LocksHeld() == 0
			})
		})
	}
}

// An attach cut short — nri-cni killed between recording its intent and
// recording the attachment (a restart, an OOM kill), or a failed attach whose
// rollback DEL failed too — leaves a record in phase adding. The sandbox's
// first container must not be created without its networks: the earlier
// attempt is undone (DEL) and the pod attached again.
func TestCreateContainerFinishesAnAttachCutShort(t *testing.T) {
	f := attachtest.New(t, []string{"alpha"}, nil)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	now := time.Now().UTC()
	require.NoError(t, f.Store.Put(&state.Record{ID: "sb1", Kind: "pod", Namespace: "team", Name: "web", UID: "uid-sb1",
		Netns: "/pinned/sb1", Phase: state.PhaseAdding, Created: now, Updated: now,
		Networks: []state.Network{{Name: "alpha", IfName: "net1"}}}))

	require.NoError(t, createContainer(t, p, pod))
	assert.Equal(t, []string{"DEL alpha net1", "ADD alpha net1"}, f.Cmds(), "undone, then attached")
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	require.NoError(t, createContainer(t, p, pod), "the next container")
	assert.Len(t, f.Cmds(), 2)
}

// Background attach (backgroundAttach): the ADD fails and so does the
// rollback's DEL. The first container is refused with the attach's error,
// and so is every later one while the DEL keeps failing: a record left in
// phase adding is never taken for an attached pod.
func TestBackgroundAttachFailedRollbackNeverLetsAContainerThrough(t *testing.T) {
	dir := t.TempDir()
	failing := filepath.Join(dir, "fail")
	require.NoError(t, os.WriteFile(failing, nil, 0o600))
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {
		"failOn": "ADD,DEL", "failMsg": "plugin broken", "failWhile": failing}})
	f.Reconfigure(func(c *config.Config) { c.BackgroundAttach = true })
	t.Cleanup(f.Mgr.Background().WaitIdle)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
	pod := runningPod(f, "sb1", 10)
	require.NoError(t, p.RunPodSandbox(context.Background(), pod))
	for i := range 3 {
		err := createContainer(t, p, pod)
		require.Error(t, err, "container %d created without its networks", i)
		assert.Contains(t, err.Error(), "plugin broken")
	}
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAdding, rec.Phase)

	require.NoError(t, os.Remove(failing)) // the plugin works again
	require.NoError(t, createContainer(t, p, pod))
	rec, err = f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseAttached, rec.Phase)
	cmds := f.Cmds()
	assert.Equal(t, "ADD alpha net1", cmds[len(cmds)-1])
}
