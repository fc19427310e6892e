package cni_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// nriConf is a YAML nri.conf, as the ConfigMap holds it: not a CNI config.
const nriConf = "confDir: /etc/nri-cni/net.d\nkubernetes:\n  npwgAnnotation: true\n"

func conflist(name string) string {
	return `{"cniVersion": "1.0.0", "name": "` + name + `", "plugins": [{"type": "bridge"}]}`
}

// TestLoadDirConfigMapVolume: confDir is deploy/base's whole ConfigMap, as
// the kubelet writes a configMap volume (links to "..data/<key>", "..data"
// to a "..<timestamp>" directory): every network key is loaded, nri.conf
// and the volume's own entries are not and are not reported as skipped, and
// after the kubelet's atomic update an added key is there and a removed one
// gone.
func TestLoadDirConfigMapVolume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testenv.ConfigMapVolume(t, dir, map[string]string{cni.ConfigFileName: nriConf, "10-secondary.conflist": conflist("secondary")})
	load := func() []string {
		t.Helper()
		nets, skipped, err := cni.LoadDir(context.Background(), nil, dir)
		if err != nil {
			t.Fatalf("LoadDir: %v", err)
		}
		if len(skipped) != 0 {
			t.Errorf("skipped = %v, want none (nri.conf and the volume's ..data entries are not networks)", skipped)
		}
		var names []string
		for _, n := range nets {
			names = append(names, n.Name+"@"+filepath.Base(n.File))
		}
		return names
	}
	if got, want := load(), []string{"secondary@10-secondary.conflist"}; !slices.Equal(got, want) {
		t.Errorf("networks = %v, want %v", got, want)
	}

	// An admin adds a key and changes nri.conf; then removes the first key.
	testenv.ConfigMapVolume(t, dir, map[string]string{cni.ConfigFileName: nriConf + "logLevel: debug\n",
		"10-secondary.conflist": conflist("secondary"), "20-storage.conf": `{"cniVersion": "1.0.0", "name": "storage", "type": "macvlan"}`})
	if got, want := load(), []string{"secondary@10-secondary.conflist", "storage@20-storage.conf"}; !slices.Equal(got, want) {
		t.Errorf("after adding a key: networks = %v, want %v", got, want)
	}
	testenv.ConfigMapVolume(t, dir, map[string]string{cni.ConfigFileName: nriConf, "20-storage.conf": conflist("storage")})
	if got, want := load(), []string{"storage@20-storage.conf"}; !slices.Equal(got, want) {
		t.Errorf("after removing a key: networks = %v, want %v", got, want)
	}
}

// TestLoadDirSkipsOnlyNriConf: a file named nri.conf is never a network,
// wherever confDir is; other YAML files with a config extension are
// reported as skipped as before.
func TestLoadDirSkipsOnlyNriConf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, cni.ConfigFileName, nriConf, 0o600)
	writeFile(t, dir, "10-a.conflist", conflist("a"), 0o600)
	other := writeFile(t, dir, "other.conf", nriConf, 0o600)
	nets, skipped, err := cni.LoadDir(context.Background(), nil, dir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if len(nets) != 1 || nets[0].Name != "a" {
		t.Errorf("nets = %+v, want a", nets)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0].Error(), other) {
		t.Errorf("skipped = %v, want one error naming %s", skipped, other)
	}
}
