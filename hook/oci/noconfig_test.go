package oci

import (
	"context"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// withoutConfigs is a fixture whose confDir holds no network: empty, or
// (missing) not there at all, loaded as the hook loads it.
func withoutConfigs(t *testing.T, missing bool, tune func(*config.Config)) *attachtest.Fixture {
	f := attachtest.New(t, nil, nil)
	dir := f.ConfDir
	if missing {
		dir = filepath.Join(t.TempDir(), "net.d")
		f.Engine = cni.New(cni.Options{ConfDir: dir, BinDirs: f.Cfg.BinDirs, CacheDir: f.CacheDir, NoValidate: true})
		skipped, err := f.Engine.Reload(context.Background())
		require.NoError(t, err)
		require.Len(t, skipped, 1)
		require.ErrorIs(t, skipped[0], cni.ErrNoConfDir)
	}
	f.Reconfigure(func(c *config.Config) {
		c.ConfDir, c.Networks = dir, nil
		if tune != nil {
			tune(c)
		}
	})
	return f
}

// TestOCIHookWithoutConfigs: hooks.d's entry matches every container, so a
// container that asks for no network by name must start whatever nri-cni's
// own config dir holds (empty or missing: nothing to attach, logged); one
// that names a network (its annotation with podSelection, nri.conf networks)
// still fails, naming the network, the dir and, when it is missing, that.
func TestOCIHookWithoutConfigs(t *testing.T) {
	selection := func(c *config.Config) { c.PodSelection = true }
	asks := map[string]string{"nri-cni.io/networks": "storage"}
	for _, tc := range []struct {
		name    string
		missing bool
		tune    func(*config.Config)
		ann     map[string]string
		wantErr []string // fragments of the error; nil: the container starts
	}{
		{name: "nothing asked, confDir empty"},
		{name: "nothing asked, confDir missing", missing: true},
		{name: "podSelection, no annotation, confDir missing", missing: true, tune: selection},
		{name: "annotation without podSelection, confDir missing", missing: true, ann: asks},
		{name: "podSelection, annotation opts out, confDir missing", missing: true, tune: selection,
			ann: map[string]string{"nri-cni.io/networks": ""}},
		{name: "annotation names a network, confDir empty", tune: selection, ann: asks,
			wantErr: []string{"container c1", `unknown network "storage"`}},
		{name: "annotation names a network, confDir missing", missing: true, tune: selection, ann: asks,
			wantErr: []string{"container c1", `unknown network "storage"`, "does not exist"}},
		{name: "nri.conf networks names one, confDir missing", missing: true,
			tune:    func(c *config.Config) { c.Networks = []string{"storage"} },
			wantErr: []string{`unknown network "storage"`, "does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := withoutConfigs(t, tc.missing, tc.tune)
			b := bundle(t, tc.ann, "new")
			err := runHook(t, f, StageCreateRuntime, specs.State{ID: "c1", Pid: 77, Status: specs.StateCreating, Bundle: b})
			if tc.wantErr != nil {
				require.Error(t, err)
				for _, w := range tc.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				assert.Contains(t, err.Error(), f.Mgr.Config().ConfDir, "the error names the dir")
				if !tc.missing {
					assert.NotContains(t, err.Error(), "does not exist")
				}
			} else {
				require.NoError(t, err)
			}
			_, getErr := f.Store.Get("c1")
			assert.ErrorIs(t, getErr, state.ErrNotFound, "nothing recorded")
			require.NoError(t, runHook(t, f, StagePoststop, specs.State{ID: "c1", Status: specs.StateStopped, Bundle: b}))
			assert.Empty(t, f.Calls(), "no CNI call")
		})
	}
}
