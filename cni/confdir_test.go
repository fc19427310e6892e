package cni_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/nri-cni/nri-cni/cni"
)

// TestReloadMissingConfDir: a config dir that does not exist loads nothing
// at the first load, reported as ErrNoConfDir in skipped (the OCI hook runs
// for every container: nri-cni's missing config must not fail them); once
// networks are loaded, the dir going away is an error and they are kept.
func TestReloadMissingConfDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	e := cni.New(cni.Options{ConfDir: dir, NoValidate: true})
	ctx := context.Background()

	skipped, err := e.Reload(ctx)
	if err != nil {
		t.Fatalf("first load of a missing dir: %v", err)
	}
	if len(skipped) != 1 || !errors.Is(skipped[0], cni.ErrNoConfDir) || !errors.Is(skipped[0], fs.ErrNotExist) {
		t.Fatalf("skipped = %v, want one ErrNoConfDir", skipped)
	}
	if n := e.Networks(); len(n) != 0 {
		t.Fatalf("networks = %v, want none", n)
	}
	if _, _, err := cni.LoadDir(ctx, nil, dir); !errors.Is(err, cni.ErrNoConfDir) {
		t.Fatalf("LoadDir of a missing dir: %v, want ErrNoConfDir", err)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := `{"cniVersion": "1.0.0", "name": "alpha", "plugins": [{"type": "bridge"}]}`
	if err := os.WriteFile(filepath.Join(dir, "10-alpha.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if skipped, err := e.Reload(ctx); err != nil || len(skipped) != 0 || len(e.Networks()) != 1 {
		t.Fatalf("reload with a config: skipped %v, err %v, networks %d", skipped, err, len(e.Networks()))
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reload(ctx); !errors.Is(err, cni.ErrNoConfDir) {
		t.Fatalf("reload after the dir went away: %v, want ErrNoConfDir", err)
	}
	if n := e.Networks(); len(n) != 1 || n[0].Name != "alpha" {
		t.Fatalf("networks after a failed reload = %v, want alpha kept", n)
	}
}
