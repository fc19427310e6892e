package attach_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// A Stop in a runtime's request holds the pod's namespace and DELs in it
// under the held path; done in time, it answers as before and lets go.
func TestStopDELsInTheHeldNamespace(t *testing.T) {
	f := attachtest.New(t, []string{"alpha", "beta"}, nil)
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)

	ctx := attachtest.WithDeadline(t, 10*time.Second)
	require.NoError(t, f.Mgr.Detach(ctx, attachtest.Pod("sb1", 0), false))
	calls := f.Calls()[2:]
	require.Len(t, calls, 2)
	for _, c := range calls {
		assert.Equal(t, "DEL", c.Cmd)
		assert.Equal(t, "/fake/held/fake/netns/42", c.Netns, "DEL in the held namespace")
	}
	rec, err := f.Store.Get("sb1")
	require.NoError(t, err)
	assert.Equal(t, state.PhaseTornDown, rec.Phase)
	f.Netns.Mu.Lock()
	assert.Equal(t, 1, f.Netns.Holds)
	assert.Equal(t, 1, f.Netns.Released, "let go once the teardown ended")
	f.Netns.Mu.Unlock()

	// Without a runtime deadline (a background loop) nothing is held.
	_, err = f.Mgr.Attach(context.Background(), attachtest.Pod("sb2", 43))
	require.NoError(t, err)
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb2", 0), false))
	f.Netns.Mu.Lock()
	assert.Equal(t, 1, f.Netns.Holds)
	f.Netns.Mu.Unlock()
}

// A Stop whose DELs outlast the runtime's deadline answers in time
// (ErrTeardownContinues) and goes on in the namespace it holds, even after
// the runtime removed the pin: the plugins still get the namespace, not an
// empty one. A Remove meanwhile waits for it; then the record goes.
func TestStopPastTheDeadlineGoesOnInTheHeldNamespace(t *testing.T) {
	stuck := filepath.Join(t.TempDir(), "stuck")
	require.NoError(t, os.WriteFile(stuck, nil, 0o600))
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{
		"alpha": {"holdOn": "DEL", "holdWhile": stuck},
	})
	// deploy/base's cniTimeout: a slow DEL is not cut off by its own budget.
	f.Reconfigure(func(c *config.Config) { c.CNITimeout = config.Duration(10 * time.Second) })
	_, err := f.Mgr.Attach(context.Background(), attachtest.Pod("sb1", 42))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = f.Mgr.Detach(ctx, attachtest.Pod("sb1", 0), false)
	require.ErrorIs(t, err, attach.ErrTeardownContinues, "the runtime's request is answered")
	f.Netns.Kill("/fake/netns/42") // the runtime removes its pin

	// A RemovePodSandbox in its own request: the teardown still holds the
	// sandbox, so it is refused in time and retried later.
	rctx, rcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer rcancel()
	assert.Error(t, f.Mgr.Detach(rctx, attachtest.Pod("sb1", 0), true))

	require.NoError(t, os.Remove(stuck)) // the plugin's DEL finishes
	testenv.Eventually(t, 10*time.Second, "the teardown to end", func() bool {
		rec, err := f.Store.Get("sb1")
		return err == nil && rec.Phase == state.PhaseTornDown
	})
	var dels []string
	for _, c := range f.Calls() {
		if c.Cmd == "DEL" {
			dels = append(dels, c.Netns)
		}
	}
	assert.Equal(t, []string{"/fake/held/fake/netns/42"}, dels, "one DEL, in the held namespace, none with an empty one")
	testenv.Eventually(t, 5*time.Second, "the namespace let go", func() bool {
		f.Netns.Mu.Lock()
		defer f.Netns.Mu.Unlock()
		return f.Netns.Released == 1
	})
	require.NoError(t, f.Mgr.Detach(context.Background(), attachtest.Pod("sb1", 0), true))
	_, err = f.Store.Get("sb1")
	assert.True(t, errors.Is(err, state.ErrNotFound))
}
