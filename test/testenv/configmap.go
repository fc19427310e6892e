package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ConfigMapVolume writes files (name -> content) into dir the way the
// kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go) fills and
// updates a configMap volume without items: the data in a new directory
// "..<timestamp>", the link "..data" pointing to it swapped atomically
// (a "..data_tmp" link renamed over it), then a link "<name>" ->
// "..data/<name>" for each name not there yet, the links of names gone
// removed, and the previous "..<timestamp>" directory removed. Call it
// again with the ConfigMap's new data to update the volume.
func ConfigMapVolume(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	fail := func(err error) { t.Helper(); t.Fatalf("configMap volume %s: %v", dir, err) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	dataLink := filepath.Join(dir, "..data")
	old, err := os.Readlink(dataLink)
	if err != nil && !os.IsNotExist(err) {
		fail(err)
	}
	ts := fmt.Sprintf("..%s", time.Now().UTC().Format("2006_01_02_15_04_05.000000000"))
	if ts == old {
		ts += "1"
	}
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		fail(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, ts, name), []byte(content), 0o644); err != nil {
			fail(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		fail(err)
	}
	if err := os.Rename(tmp, dataLink); err != nil {
		fail(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				fail(err)
			}
		}
	}
	if old == "" {
		return
	}
	entries, err := os.ReadDir(filepath.Join(dir, old))
	if err != nil {
		fail(err)
	}
	for _, e := range entries {
		if _, still := files[e.Name()]; !still {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
				fail(err)
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
		fail(err)
	}
}
