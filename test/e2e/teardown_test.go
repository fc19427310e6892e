package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// A DEL that keeps failing (a broken plugin) must not block the pod's
// deletion: CRI-O hands a StopPodSandbox error back to the kubelet, which
// retries Stop and cannot delete the pod. Stop and Remove succeed through
// CRI, nri-cni keeps the record (status and the pending-teardowns metric show
// it) and retries in the background; once the plugin works again the address
// is released.
func TestFailingDELNeverBlocksPodDeletion(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt harness.Runtime) {
		broken := filepath.Join(t.TempDir(), "del-broken")
		require.NoError(t, os.WriteFile(broken, nil, 0o644))
		addr := freeLoopbackAddr(t)
		s := newSuite(t, rt, suiteOpts{
			recorder:   map[string]any{"failOn": "DEL", "failWhile": broken, "failMsg": "switch unreachable"},
			pluginArgs: []string{"--metrics-addr", addr},
		})
		id, st := s.mustRun("sticky")
		require.NotNil(t, s.net1(st.NetnsPath))

		require.NoError(t, s.cri.StopPod(s.ctx, id), "Stop succeeds although DEL fails")
		require.NoError(t, s.cri.RemovePod(s.ctx, id), "Remove succeeds although DEL fails")
		pods, err := s.cri.ListPods(s.ctx, owner(t))
		require.NoError(t, err)
		assert.Empty(t, pods, "the pod is deleted")
		assert.Positive(t, s.count("DEL", id), "DEL was tried")
		assert.Len(t, s.net.IPFilesOf(id), 1, "the address stays allocated while DEL fails")
		assert.NotEmpty(t, s.cfg.StateFilesOf(id), "the record is kept for the retry")
		assert.Contains(t, statusSandboxes(s), id, "nri-cni status lists the pending record")
		assert.Equal(t, 1, pendingTeardowns(t, addr), "nri_cni_pending_teardowns")

		require.NoError(t, os.Remove(broken)) // the plugin works again
		testenv.Eventually(t, 2*time.Minute, "the background retry to release the address", func() bool {
			return len(s.net.IPFilesOf(id)) == 0 && len(s.cfg.StateFilesOf(id)) == 0
		})
		testenv.Eventually(t, 10*time.Second, "no pending teardowns", func() bool { return pendingTeardowns(t, addr) == 0 })
		s.assertNoLeaks()
		// Logged once the retry dropped the record: waited for, not read at once.
		testenv.Eventually(t, 10*time.Second, "the retry's log line", func() bool {
			return strings.Contains(s.cfg.Log(), "teardown retry succeeded: networks released")
		})
	})
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port free right now.
func freeLoopbackAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

var pendingMetric = regexp.MustCompile(`(?m)^nri_cni_pending_teardowns (\S+)$`)

// pendingTeardowns scrapes nri_cni_pending_teardowns from the plugin (-1 if
// it cannot).
func pendingTeardowns(t *testing.T, addr string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Logf("metrics: %v", err)
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := pendingMetric.FindSubmatch(body)
	if m == nil {
		t.Logf("metrics: no nri_cni_pending_teardowns")
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return int(v)
}

// statusSandboxes runs `nri-cni status --json` on the suite's config and
// returns the sandboxes it lists.
func statusSandboxes(s *suite) []string {
	s.t.Helper()
	out, err := exec.CommandContext(s.ctx, world.bin, "status", "--config", s.cfgPath, "--json").Output()
	require.NoError(s.t, err, "nri-cni status")
	var rows []struct {
		Sandbox string `json:"sandbox"`
	}
	require.NoError(s.t, json.Unmarshal(out, &rows), "status --json output: %s", out)
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.Sandbox)
	}
	return ids
}
