package e2e

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestStartedWithoutNetworksOnAFailOpenNode: a node never set up to fail
// closed (containerd without NRI's default validator). nri-cni is away; a
// pod that asks for networks starts its container without them. When
// nri-cni comes back it attaches the pod, says so loudly (error log,
// nri_cni_started_without_networks_total) and, with failClosed.restartStarted,
// stops the container so that its restart sees the networks; the node is
// reported fail-open (nri_cni_node_fail_open). Readiness: /readyz is 200
// once the resync is done.
func TestStartedWithoutNetworksOnAFailOpenNode(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ctd := privateContainerd(ctx, t) // no validator

	sec, cfg, cfgPath := pluginSetup(t, dir)
	cfg.PodSelection = true
	writeConfig(t, cfg, cfgPath, map[string]any{"requireAnnotation": true,
		"failClosed": map[string]any{"restartStarted": true, "restartGrace": "5s", "containerdConfig": filepath.Join(ctd.Dir, "config.toml")}})
	cleanupPodsAt(t, ctd.Address)
	cri := dialCRI(ctx, t, ctd.Address)
	defer cri.Close()

	// nri-cni away: the container runs without net1.
	pod := newRequiredPod(ctx, t, cri, "early-bird", map[string]string{"nri-cni.io/networks": sec.Name})
	ctrID, err := cri.CreateContainer(ctx, pod.id, pod.spec, harness.ContainerSpec{Name: "app"})
	require.NoError(t, err, "nothing refuses it on this node")
	require.NoError(t, cri.StartContainer(ctx, ctrID))
	assert.Nil(t, podNet1(t, pod.netns))

	addr := freeLoopbackAddr(t)
	plugin, err := harness.StartPlugin(ctx, ctd, world.bin, cfgPath, cfg, "--metrics-addr", addr)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nri-cni log:\n%s", cfg.Log())
		}
		assert.NoError(t, plugin.Stop())
	})
	testenv.Eventually(t, time.Minute, "nri-cni ready (resync done)", func() bool {
		code, _ := httpGet(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	})
	require.NotNil(t, podNet1(t, pod.netns), "attached by the resync")
	assert.Contains(t, cfg.Log(), "containers of this pod started before its networks were attached")
	assert.Equal(t, 1, metricValue(t, addr, "nri_cni_started_without_networks_total"))
	assert.Equal(t, 1, metricValue(t, addr, "nri_cni_node_fail_open"), "the node is reported fail-open")
	testenv.Eventually(t, time.Minute, "the container stopped (failClosed.restartStarted)", func() bool {
		st, err := cri.ContainerStatus(ctx, ctrID)
		return err == nil && st.State == "CONTAINER_EXITED"
	})
	testenv.Eventually(t, 10*time.Second, "the stop logged", func() bool {
		return regexp.MustCompile(`failClosed.restartStarted: stopped \(SIGTERM\)`).MatchString(cfg.Log())
	})

	cleanupPods(t, ctd.Address)
	assert.Empty(t, sec.IPFilesOf(pod.id), "address released")
	assert.Empty(t, cfg.StateFilesOf(pod.id), "record dropped")
}

// httpGet returns the status code and body of a GET (0 if it fails).
func httpGet(t *testing.T, url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metricValue scrapes one unlabelled metric from the plugin (-1 if absent).
func metricValue(t *testing.T, addr, name string) int {
	_, body := httpGet(t, "http://"+addr+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return int(v)
}
