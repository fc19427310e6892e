package cni

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMultusDetector(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
		// The cache keys on the dir's mtime: make each change visible even
		// on a filesystem with coarse timestamps.
		later := time.Now().Add(time.Duration(len(name)) * time.Second)
		require.NoError(t, os.Chtimes(dir, later, later))
	}
	d := NewMultusDetector(dir)
	assert.Empty(t, d.Primary(), "empty dir")

	write("10-bridge.conflist", `{"cniVersion":"1.0.0","name":"pri","plugins":[{"type":"bridge"}]}`)
	assert.Empty(t, d.Primary(), "a plain primary network")

	// Multus's thick plugin installs itself as the first file.
	write("00-multus.conf", `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim"}`)
	assert.Equal(t, filepath.Join(dir, "00-multus.conf"), d.Primary())

	require.NoError(t, os.Remove(filepath.Join(dir, "00-multus.conf")))
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(dir, later, later))
	assert.Empty(t, d.Primary(), "removed")

	// The thin plugin, in a conflist, not first: containerd and CRI-O use
	// the first file only.
	write("99-multus.conflist", `{"cniVersion":"0.3.1","name":"m","plugins":[{"type":"multus"}]}`)
	assert.Empty(t, d.Primary(), "not the primary")
	write("05-multus.conflist", `{"cniVersion":"0.3.1","name":"m","plugins":[{"type":"multus"}]}`)
	assert.Equal(t, filepath.Join(dir, "05-multus.conflist"), d.Primary())

	assert.Empty(t, NewMultusDetector(filepath.Join(dir, "missing")).Primary(), "no dir")
}
