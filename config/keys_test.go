package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/config"
)

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	top := []string{"confDir", "binDirs", "pluginRoot", "cacheDir", "stateDir", "networks", "defaultNetworks", "defaultNetworksExclude", "ifnamePrefix", "cniTimeout",
		"logLevel", "logFile", "failurePolicy", "syncAttach", "parallelAttach", "backgroundAttach", "statusInterval", "checkInterval", "podSelection", "requireAnnotation", "namespaces", "podCapabilities", "podCNIArgs", "hook", "limits", "failClosed", "kubernetes"}
	tests := []struct {
		name, in, key string
		allowed       []string // nil: not checked
	}{
		{"top-level yaml", "bogus: 1\n", "bogus", top},
		{"top-level json", `{"confDir": "/etc/x", "bogus": true}`, "bogus", top},
		{"typo", "podCapability: [mac]\n", "podCapability", top},
		{"first in sorted order", "zz: 1\naa: 2\n", "aa", top},
		{"nested hook", "hook:\n  bogus: [a]\n", "hook.bogus",
			[]string{"podNameAnnotations", "podNamespaceAnnotations", "podUIDAnnotations", "sandboxIDAnnotations"}},
		{"nested namespaces json", `{"namespaces": {"include": [], "exlude": ["a"]}}`, "namespaces.exlude", []string{"include", "exclude"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tt.in))
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Parse(%q) = %v, want ErrInvalid", tt.in, err)
			}
			var uk *config.UnknownKeyError
			if !errors.As(err, &uk) {
				t.Fatalf("Parse(%q) = %v, want an UnknownKeyError", tt.in, err)
			}
			if uk.Key != tt.key {
				t.Errorf("Key = %q, want %q", uk.Key, tt.key)
			}
			if !reflect.DeepEqual(uk.Allowed, tt.allowed) {
				t.Errorf("Allowed = %q, want %q", uk.Allowed, tt.allowed)
			}
			want := `unknown key "` + tt.key + `" (allowed: ` + strings.Join(tt.allowed, ", ") + ")"
			if err.Error() != want {
				t.Errorf("Parse(%q) = %q, want %q", tt.in, err, want)
			}
		})
	}
}

// Keys match as the decoder matches them (case-insensitively), so the
// check rejects exactly what the decoder would.
func TestKnownKeysAnyCase(t *testing.T) {
	t.Parallel()
	got, err := config.Parse([]byte("LogLevel: debug\nhook: {PodNameAnnotations: [x]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.LogLevel != "debug" || !reflect.DeepEqual(got.Hook.PodNameAnnotations, []string{"x"}) {
		t.Errorf("Parse = %+v", got)
	}
}

func TestLoadUnknownKeyMessage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nri.conf")
	if err := os.WriteFile(path, []byte("logLevel: info\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path)
	want := "config " + path + `: unknown key "bogus" (allowed: confDir, binDirs, pluginRoot, cacheDir, stateDir, networks, ` +
		`defaultNetworks, defaultNetworksExclude, ifnamePrefix, cniTimeout, logLevel, logFile, failurePolicy, syncAttach, parallelAttach, backgroundAttach, statusInterval, checkInterval, podSelection, requireAnnotation, namespaces, podCapabilities, podCNIArgs, hook, limits, failClosed, kubernetes)`
	if err == nil || err.Error() != want {
		t.Errorf("Load = %v\nwant %s", err, want)
	}
	if !errors.Is(err, config.ErrInvalid) {
		t.Errorf("Load = %v, want ErrInvalid", err)
	}
}
