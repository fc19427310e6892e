package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestStatus(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nri.conf")
	require.NoError(t, os.WriteFile(cfg, []byte("stateDir: "+dir+"/state\n"), 0o644))
	store, err := state.Open(filepath.Join(dir, "state"))
	require.NoError(t, err)
	require.NoError(t, store.Put(&state.Record{ID: "abcdef0123456789", Kind: "pod", Namespace: "shop", Name: "web",
		Netns: "/run/netns/cni-1", Phase: state.PhaseAttached, Created: time.Now().Add(-time.Minute),
		Networks: []state.Network{{Name: "sec", IfName: "net1", IPs: []string{"10.1.0.5/24"}}}}))
	require.NoError(t, store.Put(&state.Record{ID: "fedcba9876543210", Kind: "pod", Namespace: "shop", Name: "db",
		Netns: "/run/netns/cni-2", Phase: state.PhaseAttached, Created: time.Now().Add(-time.Minute),
		Networks: []state.Network{{Name: "sec", IfName: "net1"}, {Name: "sec2", IfName: "net2"}},
		Policy:   &state.Policy{Digest: "d1", Quarantined: []string{"net2"}}}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "state", "broken.json"), []byte("{"), 0o600))

	code, out, errOut := runApp(t, nil, "status", "--config", cfg)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "NAMESPACE")
	assert.Regexp(t, `shop\s+web\s+abcdef0123456\s+attached\s+sec\s+net1\s+10.1.0.5/24\s+1m`, out)
	assert.Contains(t, errOut, "broken.json", "a corrupt record is reported, not fatal")

	code, out, _ = runApp(t, nil, "status", "--config", cfg, "--json")
	require.Equal(t, 0, code)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 3)
	byIf := map[string]map[string]any{}
	for _, r := range rows {
		byIf[r["pod"].(string)+"/"+r["ifname"].(string)] = r
	}
	assert.Equal(t, "/run/netns/cni-1", byIf["web/net1"]["netns"])
	assert.NotContains(t, byIf["web/net1"], "policyDigest", "no MultiNetworkPolicy table")
	// MultiNetworkPolicy: the digest programmed, and which interface is
	// quarantined.
	assert.Equal(t, "d1", byIf["db/net1"]["policyDigest"])
	assert.NotContains(t, byIf["db/net1"], "quarantined")
	assert.Equal(t, true, byIf["db/net2"]["quarantined"])
}

func TestInstallPlugins(t *testing.T) {
	from, to := t.TempDir(), filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.WriteFile(filepath.Join(from, "bridge"), []byte("new-bridge"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(from, "host-local"), []byte("new-ipam"), 0o755))
	require.NoError(t, os.MkdirAll(to, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(to, "bridge"), []byte("node-bridge"), 0o755))

	code, out, errOut := runApp(t, nil, "install-plugins", "--from", from, "--to", to, "bridge", "host-local")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "bridge: present, kept")
	assert.Contains(t, out, "host-local: installed")
	data, _ := os.ReadFile(filepath.Join(to, "bridge"))
	assert.Equal(t, "node-bridge", string(data), "the node's own plugin is never replaced")
	// --replace (nri-cni's own binary, for the await hook): renewed.
	code, out, errOut = runApp(t, nil, "install-plugins", "--replace", "--from", from, "--to", to, "bridge")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "bridge: installed")
	data, _ = os.ReadFile(filepath.Join(to, "bridge"))
	assert.Equal(t, "new-bridge", string(data))
	require.NoError(t, os.WriteFile(filepath.Join(to, "bridge"), []byte("node-bridge"), 0o755))
	st, err := os.Stat(filepath.Join(to, "host-local"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())

	code, _, errOut = runApp(t, nil, "install-plugins", "--from", from, "--to", to, "../etc/passwd")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not a plugin name")
	code, _, errOut = runApp(t, nil, "install-plugins", "--from", from, "--to", to, "missing")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "missing")
}

func TestHealthz(t *testing.T) {
	up, synced := true, false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up {
			http.Error(w, "not connected to the runtime", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/readyz" && !synced {
			http.Error(w, "synchronizing with the runtime", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, _, _ := runApp(t, nil, "healthz", "--addr", addr)
	assert.Equal(t, 0, code)
	code, _, errOut := runApp(t, nil, "healthz", "--ready", "--addr", addr)
	assert.Equal(t, 1, code, "alive, not ready")
	assert.Contains(t, errOut, "readyz: 503 Service Unavailable: synchronizing")
	synced = true
	code, _, _ = runApp(t, nil, "healthz", "--ready", "--addr", addr)
	assert.Equal(t, 0, code)
	up = false
	code, _, errOut = runApp(t, nil, "healthz", "--addr", addr)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "503")
}

func TestStatusNetworks(t *testing.T) {
	dir := t.TempDir()
	bin, err := testenv.BuildRecorder(filepath.Join(dir, "bin"))
	require.NoError(t, err)
	confDir := filepath.Join(dir, "net.d")
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	for name, extra := range map[string]string{
		"ready":   ``,
		"waiting": `, "failOn": "STATUS", "failMsg": "no address left in the pool"`,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(confDir, name+".conflist"), []byte(`{"cniVersion":"1.1.0","name":"`+name+
			`","plugins":[{"type":"cni-recorder","recordFile":"`+filepath.Join(dir, "calls")+`"`+extra+`}]}`), 0o644))
	}
	cfg := filepath.Join(dir, "nri.conf")
	require.NoError(t, os.WriteFile(cfg, []byte("stateDir: "+dir+"/state\nconfDir: "+confDir+"\nbinDirs: ["+filepath.Dir(bin)+"]\ncacheDir: "+dir+"/cache\n"), 0o644))

	code, out, errOut := runApp(t, nil, "status", "--config", cfg, "--networks", "--json")
	require.Equal(t, 0, code, errOut)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	assert.Equal(t, map[string]any{"network": "ready", "ready": true}, rows[0])
	assert.Equal(t, "waiting", rows[1]["network"])
	assert.Equal(t, false, rows[1]["ready"])
	assert.Contains(t, rows[1]["reason"], "no address left in the pool")

	code, out, errOut = runApp(t, nil, "status", "--config", cfg)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `waiting\s+false\s+.*no address left in the pool`, out, "the default listing shows readiness too")
}
