package attach_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// A drift CHECK yields to a teardown: a Stop arriving while a CHECK of the
// pod is stuck in its plugin does not wait for the sandbox's lock until the
// runtime's deadline. The CHECK is cancelled and reports nothing, and the
// DEL runs at once, in the pod's netns (a DEL put off until the netns is gone
// leaves bridge's ipMasq rules behind: seen on the real kubelet).
func TestStopCancelsARunningDriftCheck(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	t.Cleanup(func() { _ = os.Remove(hold) })
	f := attachtest.New(t, []string{"alpha"}, map[string]map[string]any{"alpha": {"holdOn": "CHECK", "holdWhile": hold}})
	f.Reconfigure(func(c *config.Config) { c.CNITimeout = config.Duration(time.Minute) })
	sb := attachtest.Pod("sb1", 42)
	_, err := f.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)

	type result struct {
		checked, failed int
		busy            bool
	}
	done := make(chan result, 1)
	go func() {
		c, fl, b := f.Mgr.Check(context.Background(), sb.ID)
		done <- result{c, fl, b}
	}()
	testenv.Eventually(t, 10*time.Second, "the CHECK held in the plugin", func() bool {
		return slices.Contains(f.Cmds(), "CHECK alpha net1")
	})

	// Had the Stop waited for the CHECK's lock, it would have failed at the
	// deadline (busy); no wall-clock bound, which a loaded machine breaks.
	require.NoError(t, f.Mgr.Detach(attachtest.WithDeadline(t, 2*time.Second), sb, false), "the Stop did not wait for the CHECK")
	select {
	case r := <-done:
		assert.Equal(t, result{}, r, "a cancelled CHECK checked nothing and found no drift")
	case <-time.After(10 * time.Second):
		t.Fatal("the CHECK did not end")
	}
	calls := f.Calls()
	last := calls[len(calls)-1]
	assert.Equal(t, "DEL", last.Cmd)
	assert.Equal(t, "/fake/held/fake/netns/42", last.Netns, "the DEL ran in the pod's netns (held)")
}
