package reconcile

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestConfigsReloadFromAConfigMapVolume: confDir is a configMap volume
// (deploy/base mounts the whole ConfigMap, nri.conf included), updated the
// way the kubelet does it. A key an admin adds is loaded; a changed key,
// whose only trace in the directory is the "..data" link swapped to a new
// "..<timestamp>" directory, is loaded with its new content; a removed key
// is unloaded; nri.conf is never loaded nor warned about.
func TestConfigsReloadFromAConfigMapVolume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	data := map[string]string{cni.ConfigFileName: "confDir: /etc/nri-cni/net.d\n", "10-secondary.conflist": bridgeList("secondary")}
	testenv.ConfigMapVolume(t, dir, data)
	engine := cni.New(cni.Options{ConfDir: dir, NoValidate: true})
	_, err := engine.Reload(context.Background())
	require.NoError(t, err)

	logger, hook := logtest.NewNullLogger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reloads atomic.Int32
	require.NoError(t, WatchConfigs(ctx, engine, dir, logrus.NewEntry(logger), func() { reloads.Add(1) }))
	names := func() []string {
		var out []string
		for _, n := range engine.Networks() {
			out = append(out, n.Name)
		}
		return out
	}
	require.Equal(t, []string{"secondary"}, names())

	step := func(what string, want []string) {
		t.Helper()
		before := reloads.Load()
		start := time.Now()
		testenv.ConfigMapVolume(t, dir, data)
		testenv.Eventually(t, 10*time.Second, what, func() bool { return reloads.Load() > before && slices.Equal(names(), want) })
		t.Logf("%s: loaded %v %s after the update", what, names(), time.Since(start).Round(time.Millisecond))
	}
	data["20-storage.conflist"] = bridgeList("storage")
	step("an added key", []string{"secondary", "storage"})
	data["20-storage.conflist"] = bridgeList("storage-v2")
	step("a changed key (only ..data swapped)", []string{"secondary", "storage-v2"})
	delete(data, "10-secondary.conflist")
	step("a removed key", []string{"storage-v2"})

	for _, e := range hook.AllEntries() {
		assert.GreaterOrEqual(t, e.Level, logrus.InfoLevel, "no warning or error: %s %v", e.Message, e.Data)
		assert.NotEqual(t, "skipping invalid CNI config", e.Message, "%v", e.Data)
	}
}

func bridgeList(name string) string {
	return `{"cniVersion": "1.0.0", "name": "` + name + `", "plugins": [{"type": "bridge", "bridge": "br0"}]}`
}
