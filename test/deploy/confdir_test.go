package deploy

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestConfDirIsTheWholeConfigMap: what the ConfigMap's comment promises —
// every key but nri.conf is a network in confDir, reloaded live — holds for
// a key an admin adds: confDir is a configMap volume of the whole ConfigMap
// (no items, which would leave an added key out; no subPath, which the
// kubelet never updates), and nri-cni's loader, run on that volume as the
// kubelet writes it, loads exactly the ConfigMap's networks and takes
// nri.conf for none (nothing skipped).
func TestConfDirIsTheWholeConfigMap(t *testing.T) {
	b := loadBase(t)
	c := b.Container(ContainerName)
	cfg := parseNriConf(t, b)
	m := MountFor(c, cfg.ConfDir)
	require.NotNil(t, m, "confDir %s is on no mount", cfg.ConfDir)
	assert.Equal(t, cfg.ConfDir, m.MountPath, "confDir is the volume's root")
	assert.Empty(t, m.SubPath, "a subPath mount is never updated")
	v := b.Volume(m.Name)
	require.NotNil(t, v)
	require.NotNil(t, v.ConfigMap, "confDir is the ConfigMap")
	assert.Equal(t, b.ConfigMap.Name, v.ConfigMap.Name)
	assert.Empty(t, v.ConfigMap.Items, "every key, so that an added network appears")
	assert.Equal(t, ConfigKey, cni.ConfigFileName, "the key nri-cni's loader leaves alone is the ConfigMap's nri.conf")

	dir := filepath.Join(t.TempDir(), "net.d")
	testenv.ConfigMapVolume(t, dir, b.ConfigMap.Data)
	nets, skipped, err := cni.LoadDir(context.Background(), nil, dir)
	require.NoError(t, err)
	assert.Empty(t, skipped, "nothing in the volume is an invalid network (nri.conf is not read as one)")
	var files []string
	for _, n := range nets {
		files = append(files, filepath.Base(n.File))
	}
	assert.Equal(t, b.NetworkKeys(), files, "every network key, and nothing else")
}
