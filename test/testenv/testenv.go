// Package testenv holds helpers shared by nri-cni's tests: root checks,
// building the fake CNI plugin and nri-cni itself, locating the pinned real
// CNI plugins, and unique, self-cleaning network namespaces.
package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nri-cni/nri-cni/test/harness"
)

// RequireRoot skips the test, saying why, unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (real network namespaces, CNI plugins, runtimes); run `sudo make test`")
	}
}

// UniqueName returns prefix + 8 random hex chars (fits IFNAMSIZ for prefixes
// up to 7 characters).
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// GoBuild builds pkg (relative to the repo root) into dir/name.
func GoBuild(dir, pkg, name string) (string, error) { return harness.GoBuild(dir, pkg, name) }

// BuildRecorder builds the recording fake CNI plugin (type "cni-recorder")
// into dir.
func BuildRecorder(dir string) (string, error) {
	return GoBuild(dir, "./test/fakes/cni-recorder", "cni-recorder")
}

// CNIPluginsDir returns the directory of the pinned reference CNI plugins
// (bridge, host-local, loopback, portmap, tuning, bandwidth, dhcp,
// firewall), installing them on first use. $NRI_CNI_CNI_BIN_DIR overrides.
func CNIPluginsDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("NRI_CNI_CNI_BIN_DIR"); d != "" {
		return d
	}
	tools, err := harness.EnsureContainerdTools()
	if err != nil {
		t.Fatal(err)
	}
	return tools.CNIDir
}

// Call is one invocation recorded by the fake plugin.
type Call struct {
	Cmd         string `json:"cmd"`
	ContainerID string `json:"containerID"`
	Netns       string `json:"netns"`
	IfName      string `json:"ifname"`
	Args        string `json:"args"`
	Network     string `json:"network"`
	// Time is when the plugin was called (RFC 3339, nanoseconds).
	Time string `json:"time"`
	// RuntimeConfig is the capability args the plugin received.
	RuntimeConfig json.RawMessage `json:"runtimeConfig,omitempty"`
	// NetnsIno is the inode of the namespace CNI_NETNS named at the call
	// (0: no netns, or it was gone): which namespace, whatever the path.
	NetnsIno uint64 `json:"netnsIno,omitempty"`
	// DeviceID is the config's "deviceID" key (a device-backed network's).
	DeviceID string `json:"deviceID,omitempty"`
	// ConfArgs is the config's "args" key (a NAD element's cni-args).
	ConfArgs json.RawMessage `json:"confArgs,omitempty"`
}

// ReadCalls reads a cni-recorder record file; a missing file is no calls.
func ReadCalls(t testing.TB, path string) []Call {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var calls []Call
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var c Call
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("record file %s: %v", path, err)
		}
		calls = append(calls, c)
	}
	return calls
}

// WriteJSON writes v as JSON to path.
func WriteJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Eventually polls cond every 20ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MainWithRecorder is a TestMain body: it builds the recording fake CNI
// plugin into a temp dir, stores the dir in *dir, runs the tests and cleans
// up. skipMsg, if not empty, is printed and the build skipped when not root
// (the package's tests then skip themselves).
func MainWithRecorder(m *testing.M, dir *string, skipMsg string) int {
	if skipMsg != "" && os.Geteuid() != 0 {
		fmt.Println(skipMsg)
		return m.Run()
	}
	d, err := os.MkdirTemp("", "nri-cni-recorder-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(d)
	if _, err := BuildRecorder(d); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*dir = d
	return m.Run()
}
