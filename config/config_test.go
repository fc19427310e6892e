package config_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nri-cni/nri-cni/config"
)

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"nil":        "",
		"whitespace": "\n  \n",
		"yaml empty": "---\n",
		"json empty": "{}",
		"comment":    "# nothing set\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var data []byte
			if in != "" {
				data = []byte(in)
			}
			got, err := config.Parse(data)
			if err != nil {
				t.Fatalf("Parse(%q): %v", in, err)
			}
			want := config.Default()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse(%q) = %+v, want defaults %+v", in, got, want)
			}
			if got.CNITimeout.D() != config.DefaultCNITimeout {
				t.Errorf("CNITimeout = %s, want %s", got.CNITimeout.D(), config.DefaultCNITimeout)
			}
			if err := want.Validate(); err != nil {
				t.Errorf("Default().Validate(): %v", err)
			}
		})
	}
}

func TestParseYAMLAndJSON(t *testing.T) {
	t.Parallel()
	want := config.Config{
		ConfDir:      "/etc/x/net.d",
		BinDirs:      []string{"/opt/a", "/opt/b"},
		CacheDir:     "/var/lib/x-cache",
		StateDir:     "/var/lib/x-state",
		Networks:     []string{"net-a", "b.2"},
		IfnamePrefix: "eth_",
		CNITimeout:   config.Duration(2500 * time.Millisecond),
		LogLevel:     "debug",
		LogFile:      "/var/log/x.log",
		Hook:         config.DefaultHookConfig(),
		FailClosed:   config.DefaultFailClosed(),
	}
	want.FailurePolicy, want.SyncAttach = "ignore", false
	want.StatusInterval = config.Duration(config.DefaultStatusInterval)
	want.PodCapabilities = []string{"mac", "portMappings"}
	want.Hook.PodNameAnnotations = []string{"example.com/pod"}
	want.Limits = config.Limits{MaxNetworksPerPod: 8, MaxAnnotationBytes: config.DefaultMaxAnnotationBytes}
	inputs := map[string]string{
		"yaml": `
confDir: /etc/x/net.d
binDirs: [/opt/a, /opt/b]
cacheDir: /var/lib/x-cache
stateDir: /var/lib/x-state
networks:
  - net-a
  - b.2
ifnamePrefix: eth_
cniTimeout: 2500ms
logLevel: debug
logFile: /var/log/x.log
failurePolicy: ignore
syncAttach: false
podCapabilities: [mac, portMappings]
hook:
  podNameAnnotations: [example.com/pod]
limits:
  maxNetworksPerPod: 8
`,
		"json": `{"confDir": "/etc/x/net.d", "binDirs": ["/opt/a", "/opt/b"],
 "cacheDir": "/var/lib/x-cache", "stateDir": "/var/lib/x-state",
 "networks": ["net-a", "b.2"], "ifnamePrefix": "eth_", "cniTimeout": "2.5s",
 "logLevel": "debug", "logFile": "/var/log/x.log",
 "failurePolicy": "ignore", "syncAttach": false, "podCapabilities": ["mac", "portMappings"],
 "hook": {"podNameAnnotations": ["example.com/pod"]}, "limits": {"maxNetworksPerPod": 8}}`,
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Parse([]byte(in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse = %+v\nwant    %+v", got, want)
			}
		})
	}
}

func TestParsePartialKeepsDefaults(t *testing.T) {
	t.Parallel()
	got, err := config.Parse([]byte("networks: [a]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Networks = []string{"a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
}

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, key string
	}{
		{"unknown key yaml", "confDir2: /etc/x\n", "confDir2"},
		{"unknown key json", `{"confDir2": "/etc/x"}`, "confDir2"},
		{"not yaml", "confDir: [unclosed\n", ""},
		{"relative confDir", "confDir: etc/x\n", "confDir"},
		{"empty confDir", "confDir: \"\"\n", "confDir"},
		{"relative cacheDir", "cacheDir: cache\n", "cacheDir"},
		{"relative stateDir", "stateDir: ./state\n", "stateDir"},
		{"relative binDirs[1]", "binDirs: [/opt/cni/bin, bin]\n", "binDirs[1]"},
		{"empty binDirs", "binDirs: []\n", "binDirs"},
		{"null binDirs", "binDirs: null\n", "binDirs"},
		{"relative logFile", "logFile: x.log\n", "logFile"},
		{"bad network name", "networks: [ok, \"bad name\"]\n", "networks[1]"},
		{"network name leading dash", "networks: [\"-x\"]\n", "networks[0]"},
		{"empty network name", "networks: [\"\"]\n", "networks[0]"},
		{"duplicate network", "networks: [a, b, a]\n", "networks[2]"},
		{"ifnamePrefix too long", "ifnamePrefix: abcdefghijklmn\n", "ifnamePrefix"},
		{"ifnamePrefix starts with digit", "ifnamePrefix: 1net\n", "ifnamePrefix"},
		{"ifnamePrefix with slash", "ifnamePrefix: ne/t\n", "ifnamePrefix"},
		{"ifnamePrefix empty", "ifnamePrefix: \"\"\n", "ifnamePrefix"},
		{"cniTimeout zero", "cniTimeout: 0s\n", "cniTimeout"},
		{"cniTimeout negative", "cniTimeout: -1s\n", "cniTimeout"},
		{"cniTimeout too long", "cniTimeout: 11m\n", "cniTimeout"},
		{"bad logLevel", "logLevel: loud\n", "logLevel"},
		{"requireAnnotation without podSelection", "requireAnnotation: true\n", "requireAnnotation"},
		{"maxNetworksPerPod zero", "limits: {maxNetworksPerPod: 0}\n", "limits.maxNetworksPerPod"},
		{"failClosed relative path", "failClosed: {containerdConfig: etc/containerd/config.toml}\n", "failClosed.containerdConfig"},
		{"failClosed nodeRoot relative", "failClosed: {nodeRoot: host}\n", "failClosed.nodeRoot"},
		{"failClosed grace too long", "failClosed: {restartGrace: 1h}\n", "failClosed.restartGrace"},
		{"failClosed hook shorter than an attach may take", "failClosed: {hookTimeout: 30s}\n", "failClosed.hookTimeout: 30s must be between 40s"},
		{"failClosed unknown key", "failClosed: {restart: true}\n", "failClosed.restart"},
		{"maxNetworksPerPod over ifnames", "limits: {maxNetworksPerPod: 100}\n", "limits.maxNetworksPerPod"},
		{"maxAnnotationBytes tiny", "limits: {maxAnnotationBytes: 10}\n", "limits.maxAnnotationBytes"},
		{"maxAnnotationBytes over the API's", "limits: {maxAnnotationBytes: 300000}\n", "limits.maxAnnotationBytes"},
		{"podCNIArgs ips without the capability", "podCNIArgs: [ips]\n", "podCNIArgs[0]"},
		{"podCNIArgs sysctl without the capability", "podCapabilities: [mac]\npodCNIArgs: [foo, sysctl]\n", "podCNIArgs[1]"},
		{"podCNIArgs duplicate", "podCNIArgs: [foo, foo]\n", "podCNIArgs[1]"},
		{"podCNIArgs empty key", "podCNIArgs: [\"\"]\n", "podCNIArgs[0]"},
		{"limits unknown key", "limits: {maxNetworks: 3}\n", "limits.maxNetworks"},
		{"relative pluginRoot", "pluginRoot: host\n", "pluginRoot"},
		{"pluginRoot not clean", "pluginRoot: /host/\n", "pluginRoot"},
		{"pluginRoot with ..", "pluginRoot: /host/../x\n", "pluginRoot"},
		{"binDirs as the container sees them", "pluginRoot: /host\nbinDirs: [/opt/cni/bin, /host/opt/cni/bin]\n", "binDirs[1]"},
		{"binDirs the root itself", "pluginRoot: /host\nbinDirs: [/host]\n", "binDirs[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q): want error", tt.in)
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want errors.Is ErrInvalid", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.key) {
				t.Errorf("Parse(%q) = %q, want the message to name %q", tt.in, err, tt.key)
			}
		})
	}
}

// TestParseCNITimeoutDecodeErrorNamesKey covers cniTimeout values that fail
// while decoding (not in Validate).
//
// KNOWN BUG (reported): Duration.UnmarshalJSON's error is passed through
// encoding/json unwrapped, so the message ("bad duration \"abc\"..." / "want a
// duration string...") does not name the key "cniTimeout". This test requires
// the key name anyway and fails until config/duration.go (or Parse) is fixed.
func TestParseCNITimeoutDecodeErrorNamesKey(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"not a duration yaml": "cniTimeout: abc\n",
		"not a duration json": `{"cniTimeout": "abc"}`,
		"number yaml":         "cniTimeout: 5\n",
		"number json":         `{"cniTimeout": 1500}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(in))
			if err == nil {
				t.Fatalf("Parse(%q): want error", in)
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want errors.Is ErrInvalid", in, err)
			}
			// Requires the fix for the bug described above.
			if !strings.Contains(err.Error(), "cniTimeout") {
				t.Errorf("Parse(%q) = %q, want the message to name \"cniTimeout\"", in, err)
			}
		})
	}
}

func TestValidateDirect(t *testing.T) {
	t.Parallel()
	c := config.Default()
	c.CNITimeout = config.Duration(-time.Second)
	err := c.Validate()
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "cniTimeout") {
		t.Errorf("Validate() = %v, want ErrInvalid naming cniTimeout", err)
	}
	c = config.Default()
	c.CNITimeout = config.Duration(10 * time.Minute) // the maximum is allowed
	c.IfnamePrefix = "abcdefghijklm"                 // 13 characters: the maximum
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() at the limits: %v", err)
	}
}

func TestIfname(t *testing.T) {
	t.Parallel()
	c := config.Default()
	for i, want := range []string{"net1", "net2", "net10"} {
		idx := []int{0, 1, 9}[i]
		if got := c.Ifname(idx); got != want {
			t.Errorf("Ifname(%d) = %q, want %q", idx, got, want)
		}
	}
	c.IfnamePrefix = "eth"
	if got := c.Ifname(0); got != "eth1" {
		t.Errorf("Ifname(0) = %q, want eth1", got)
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"1500ms"`, 1500 * time.Millisecond, false},
		{`"2s"`, 2 * time.Second, false},
		{`"1m30s"`, 90 * time.Second, false},
		{`"abc"`, 0, true},
		{`""`, 0, true},
		{`1500`, 0, true},
		{`true`, 0, true},
	}
	for _, tt := range tests {
		var d config.Duration
		err := json.Unmarshal([]byte(tt.in), &d)
		if (err != nil) != tt.wantErr {
			t.Errorf("Unmarshal(%s) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && d.D() != tt.want {
			t.Errorf("Unmarshal(%s) = %s, want %s", tt.in, d.D(), tt.want)
		}
	}
	out, err := json.Marshal(config.Duration(1500 * time.Millisecond))
	if err != nil || string(out) != `"1.5s"` {
		t.Errorf("Marshal = %s, %v; want \"1.5s\"", out, err)
	}
	var back config.Duration
	if err := json.Unmarshal(out, &back); err != nil || back.D() != 1500*time.Millisecond {
		t.Errorf("round trip = %s, %v", back.D(), err)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	good := filepath.Join(dir, "nri.conf")
	if err := os.WriteFile(good, []byte("networks: [a]\ncniTimeout: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(good)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.CNITimeout.D() != 3*time.Second || !reflect.DeepEqual(cfg.Networks, []string{"a"}) {
		t.Errorf("Load = %+v", cfg)
	}

	missing := filepath.Join(dir, "nope.conf")
	_, err = config.Load(missing)
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v, want ErrNotExist naming %s", err, missing)
	}

	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("stateDir: rel\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(bad)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), bad) ||
		!strings.Contains(err.Error(), "stateDir") {
		t.Errorf("Load(bad) = %v, want ErrInvalid naming %s and stateDir", err, bad)
	}
}

func TestIntervals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, err string
	}{
		{"statusInterval: 0s\ncheckInterval: 0s\n", ""},
		{"statusInterval: 10s\ncheckInterval: 1m\n", ""},
		{"statusInterval: 100ms\n", "statusInterval: 100ms must be 0 (off) or between 1s and 24h"},
		{"checkInterval: 48h\n", "checkInterval: 48h0m0s must be 0 (off) or between 1s and 24h"},
	} {
		_, err := config.Parse([]byte(tc.in))
		if tc.err == "" {
			if err != nil {
				t.Errorf("Parse(%q) = %v", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) = %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestPluginRoot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, root string
		bin      []string
	}{
		{"", "", []string{config.DefaultBinDir}},
		{"pluginRoot: /\n", "/", []string{config.DefaultBinDir}},
		{"pluginRoot: /host\n", "/host", []string{config.DefaultBinDir}},
		// Host paths that merely start like the root are not under it.
		{"pluginRoot: /host\nbinDirs: [/hostbin, /opt/cni/bin]\n", "/host", []string{"/hostbin", "/opt/cni/bin"}},
		{`{"pluginRoot": "/rootfs", "binDirs": ["/usr/libexec/cni"]}`, "/rootfs", []string{"/usr/libexec/cni"}},
	}
	for _, tt := range tests {
		got, err := config.Parse([]byte(tt.in))
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got.PluginRoot != tt.root || !reflect.DeepEqual(got.BinDirs, tt.bin) {
			t.Errorf("Parse(%q) = pluginRoot %q, binDirs %v; want %q, %v", tt.in, got.PluginRoot, got.BinDirs, tt.root, tt.bin)
		}
	}
	_, err := config.Parse([]byte("pluginRoot: /host\nbinDirs: [/host/opt/cni/bin]\n"))
	if err == nil || !strings.Contains(err.Error(), `as the plugins see them inside it ("/opt/cni/bin")`) {
		t.Errorf("a binDir under pluginRoot: %v, want the host path suggested", err)
	}
}
