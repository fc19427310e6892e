package cni_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/nri-cni/nri-cni/cni"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		wantName  string
		wantTypes []string // nil: want an error
	}{
		{"conflist", `{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "bridge"}, {"type": "portmap"}]}`,
			"a", []string{"bridge", "portmap"}},
		{"single conf", `{"cniVersion": "1.0.0", "name": "b", "type": "bridge", "bridge": "cni0"}`,
			"b", []string{"bridge"}},
		{"garbage", `not json`, "", nil},
		{"JSON array", `[]`, "", nil},
		{"empty", ``, "", nil},
		{"list without name", `{"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}]}`, "", nil},
		{"list with empty name", `{"cniVersion": "1.0.0", "name": "", "plugins": [{"type": "bridge"}]}`, "", nil},
		{"empty plugins", `{"cniVersion": "1.0.0", "name": "a", "plugins": []}`, "", nil},
		{"conf without name", `{"cniVersion": "1.0.0", "type": "bridge"}`, "", nil},
		{"conf without type", `{"cniVersion": "1.0.0", "name": "a"}`, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := cni.Parse([]byte(tt.in))
			if tt.wantTypes == nil {
				if err == nil {
					t.Fatalf("Parse(%s) = %+v, want error", tt.in, n)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%s): %v", tt.in, err)
			}
			if n.Name != tt.wantName || n.List == nil || n.List.Name != tt.wantName || n.File != "" {
				t.Errorf("Parse(%s) = %+v, want name %q", tt.in, n, tt.wantName)
			}
			var types []string
			for _, p := range n.List.Plugins {
				types = append(types, p.Network.Type)
			}
			if strings.Join(types, ",") != strings.Join(tt.wantTypes, ",") {
				t.Errorf("plugin types = %q, want %q", types, tt.wantTypes)
			}
			if n.List.CNIVersion != "1.0.0" {
				t.Errorf("CNIVersion = %q, want 1.0.0", n.List.CNIVersion)
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := writeFile(t, dir, "10-a.conflist", `{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "bridge"}]}`, 0o600)
	n, err := cni.LoadFile(p)
	if err != nil || n.File != p || n.Name != "a" {
		t.Errorf("LoadFile = %+v, %v", n, err)
	}
	bad := writeFile(t, dir, "20-bad.conf", `{`, 0o600)
	if _, err := cni.LoadFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("LoadFile(bad) = %v, want an error naming %s", err, bad)
	}
	missing := filepath.Join(dir, "nope.conf")
	if _, err := cni.LoadFile(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadFile(missing) = %v, want an error naming %s", err, missing)
	}
}

func TestLoadDirMissingPlugin(t *testing.T) {
	t.Parallel()
	confDir, binDir := t.TempDir(), t.TempDir() // binDir holds no plugins
	p := writeFile(t, confDir, "10-a.conflist",
		`{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "no-such-plugin"}]}`, 0o600)
	garbage := writeFile(t, confDir, "20-g.conf", `garbage`, 0o600)
	writeFile(t, confDir, "README.md", `not a config`, 0o600)

	c := libcni.NewCNIConfig([]string{binDir}, nil)
	nets, skipped, err := cni.LoadDir(context.Background(), c, confDir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if len(nets) != 0 {
		t.Errorf("nets = %+v, want none", nets)
	}
	if len(skipped) != 2 {
		t.Fatalf("skipped = %v, want 2 errors", skipped)
	}
	for i, want := range []string{p, garbage} {
		if !strings.Contains(skipped[i].Error(), want) {
			t.Errorf("skipped[%d] = %q, want it to name %s", i, skipped[i], want)
		}
	}
	if !strings.Contains(skipped[0].Error(), "no-such-plugin") {
		t.Errorf("skipped[0] = %q, want it to name the missing plugin", skipped[0])
	}
}

func TestLoadDirUnreadable(t *testing.T) {
	t.Parallel()
	c := libcni.NewCNIConfig([]string{t.TempDir()}, nil)
	notDir := writeFile(t, t.TempDir(), "file", "", 0o600)
	if _, _, err := cni.LoadDir(context.Background(), c, notDir); err == nil {
		t.Errorf("LoadDir(%s) (a regular file): want error", notDir)
	}
}

// KNOWN BUG (reported): libcni.ConfFiles returns (nil, nil) for a missing
// directory, so LoadDir reports no error and no networks for a non-existent
// confDir instead of the error its doc and the brief call for. This test
// requires the error and fails until cni/networks.go is fixed.
func TestLoadDirMissingDir(t *testing.T) {
	t.Parallel()
	c := libcni.NewCNIConfig([]string{t.TempDir()}, nil)
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	nets, skipped, err := cni.LoadDir(context.Background(), c, missing)
	if err == nil {
		t.Errorf("LoadDir(%s) = %v, %v, nil; want an error", missing, nets, skipped)
	}
}

// fakePlugin answers CNI VERSION only, which is all validation asks for.
const fakePlugin = `#!/bin/sh
echo '{"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}'
`

// Not parallel: writing an executable while another test forks can make its
// exec fail with ETXTBSY.
func TestLoadDirValidAndDuplicate(t *testing.T) {
	confDir, binDir := t.TempDir(), t.TempDir()
	writeFile(t, binDir, "fake", fakePlugin, 0o755)
	first := writeFile(t, confDir, "10-a.conflist",
		`{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "fake"}]}`, 0o600)
	writeFile(t, confDir, "20-b.conf", `{"cniVersion": "0.4.0", "name": "b", "type": "fake"}`, 0o600)
	dup := writeFile(t, confDir, "30-a.json",
		`{"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "fake"}]}`, 0o600)
	old := writeFile(t, confDir, "40-old.conf", `{"cniVersion": "0.2.0", "name": "old", "type": "fake"}`, 0o600)

	c := libcni.NewCNIConfig([]string{binDir}, nil)
	nets, skipped, err := cni.LoadDir(context.Background(), c, confDir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	var names []string
	for _, n := range nets {
		names = append(names, n.Name+"="+filepath.Base(n.File))
	}
	if got, want := strings.Join(names, " "), "a=10-a.conflist b=20-b.conf"; got != want {
		t.Errorf("nets = %s, want %s", got, want)
	}
	if len(skipped) != 2 {
		t.Fatalf("skipped = %v, want 2", skipped)
	}
	if msg := skipped[0].Error(); !strings.Contains(msg, dup) || !strings.Contains(msg, first) {
		t.Errorf("skipped[0] = %q, want it to name %s and %s", msg, dup, first)
	}
	if msg := skipped[1].Error(); !strings.Contains(msg, old) || !strings.Contains(msg, `"0.2.0"`) {
		t.Errorf("skipped[1] = %q, want it to name %s and the unsupported version", msg, old)
	}
}

func TestLoadDirWithoutValidation(t *testing.T) {
	dir := t.TempDir()
	conf := `{"cniVersion":"1.0.0","name":"n1","plugins":[{"type":"no-such-plugin"}]}`
	if err := os.WriteFile(filepath.Join(dir, "10.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	nets, skipped, err := cni.LoadDir(context.Background(), nil, dir)
	if err != nil || len(skipped) != 0 || len(nets) != 1 || nets[0].Name != "n1" {
		t.Fatalf("LoadDir(nil validator) = %v, %v, %v; want n1 loaded unvalidated", nets, skipped, err)
	}
}
