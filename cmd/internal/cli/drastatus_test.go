package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/state"
)

// Issue 41, item 7: `nri-cni status` says when the DRA driver cannot read
// the kubelet's DRA checkpoint, naming the file and the error and what is
// held back; `--json` keeps its list of rows and says it on stderr;
// `--dra --json` is the report. Without the DRA driver, nothing.
func TestStatusDRACheckpoint(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nri.conf")
	stateDir := filepath.Join(dir, "state")
	require.NoError(t, os.WriteFile(cfg, []byte("stateDir: "+stateDir+"\n"), 0o644))
	_, err := state.Open(stateDir)
	require.NoError(t, err)

	code, out, _ := runApp(t, nil, "status", "--config", cfg)
	require.Equal(t, 0, code)
	assert.NotContains(t, out, "DRA checkpoint", "no DRA driver, nothing said")
	code, _, errOut := runApp(t, nil, "status", "--config", cfg, "--dra")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no report of the DRA driver")

	claims, err := state.OpenClaims(stateDir)
	require.NoError(t, err)
	const path = "/proc/1/root/var/lib/kubelet/dra_manager_state"
	r := state.CheckpointReport{Since: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), Path: path, Reason: "version",
		Error:    path + `: the kubelet's DRA checkpoint is of a kind or version nri-cni does not read: kind "DRACheckpoint" apiVersion "v2"`,
		HeldBack: []string{"team/net (uid uid-net, pods pod-1): its prepared-claim record /s/claims/uid-net.json is missing"},
		Unplaced: []string{"uid-x"}}
	require.NoError(t, claims.SaveReport(r))

	code, out, _ = runApp(t, nil, "status", "--config", cfg)
	require.Equal(t, 0, code)
	for _, line := range []string{
		"DRA checkpoint (since 2026-12-03T10:00:00Z): CANNOT READ the kubelet's " + path + " (version): " + r.Error + "\n",
		"  held back: " + r.HeldBack[0] + "\n",
		"  unreadable records of claims nri-cni cannot place (uids uid-x): every pod nri-cni has not attached before is held back",
	} {
		assert.Contains(t, out, line)
	}

	code, out, errOut = runApp(t, nil, "status", "--config", cfg, "--json")
	require.Equal(t, 0, code)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows), "still the list of rows")
	assert.Contains(t, errOut, "nri-cni: status: DRA: cannot read the kubelet's DRA checkpoint "+path+" (version) since 2026-12-03T10:00:00Z")
	assert.Contains(t, errOut, "1 claims held back, 1 unplaced records")

	code, out, _ = runApp(t, nil, "status", "--config", cfg, "--dra", "--json")
	require.Equal(t, 0, code)
	var got state.CheckpointReport
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, r, got)

	require.NoError(t, claims.SaveReport(state.CheckpointReport{Since: r.Since, Path: path, Readable: true}))
	code, out, errOut = runApp(t, nil, "status", "--config", cfg, "--json")
	require.Equal(t, 0, code)
	assert.NotContains(t, errOut, "DRA")
	code, out, _ = runApp(t, nil, "status", "--config", cfg)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "DRA checkpoint (since 2026-12-03T10:00:00Z): the kubelet's "+path+" is read\n")
}
