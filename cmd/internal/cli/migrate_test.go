package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/migrate"
	"github.com/nri-cni/nri-cni/plan"
)

// fakeCluster is the API as migrate-check reads it.
type fakeCluster struct {
	inv        migrate.Inventory
	configMaps map[string]map[string]string // "ns/name" → data
	namespace  string                       // the last Inventory's
}

func (f *fakeCluster) Inventory(_ context.Context, namespace string) (migrate.Inventory, error) {
	f.namespace = namespace
	return f.inv, nil
}

func (f *fakeCluster) ConfigMapData(_ context.Context, ns, name string) (map[string]string, error) {
	d, ok := f.configMaps[ns+"/"+name]
	if !ok {
		return nil, errors.New("ConfigMap " + ns + "/" + name + ": not found")
	}
	return d, nil
}

func runCheck(t *testing.T, c *fakeCluster, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{stdin: bytes.NewReader(nil), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "/usr/bin" }}
	if c != nil {
		a.cluster = func(ClusterOptions) (Cluster, error) { return c, nil }
	}
	code := a.run(context.Background(), append([]string{"migrate-check"}, args...))
	return code, stdout.String(), stderr.String()
}

const checkConf = "podSelection: true\nrequireAnnotation: true\npodCapabilities: [bandwidth, mac]\n" +
	"kubernetes: {npwgAnnotation: true, nadPolicy: {default: {types: [bridge], bridges: [nad-*]}}}\n"

const bridgeConfig = `{"cniVersion":"1.0.0","name":"storage","type":"bridge","bridge":"nad-storage"}`

func checkCluster() *fakeCluster {
	pod := func(name, networks string) migrate.Pod {
		return migrate.Pod{Namespace: "team-a", Name: name, Annotations: map[string]string{plan.AnnotationNPWGNetworks: networks}}
	}
	return &fakeCluster{
		inv: migrate.Inventory{Listed: 3, Pods: []migrate.Pod{pod("web", "storage"), pod("db", "storage, local")},
			NADs: []migrate.NAD{{Namespace: "team-a", Name: "storage", Config: bridgeConfig}, {Namespace: "team-a", Name: "local"}}},
		configMaps: map[string]map[string]string{"kube-system/nri-cni": {
			"nri.conf": checkConf, "10-local.conflist": `{"cniVersion":"1.0.0","name":"local","plugins":[{"type":"bridge","bridge":"nri-cni0"}]}`,
			"README": "not a network"}},
	}
}

func TestMigrateCheckFromConfigMap(t *testing.T) {
	c := checkCluster()
	code, stdout, stderr := runCheck(t, c, "--from-configmap", "kube-system/nri-cni", "-n", "team-a")
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Equal(t, 0, code, "both pods as with Multus")
	assert.Empty(t, stderr)
	assert.Equal(t, "team-a", c.namespace)
	assert.Contains(t, stdout, "NAMESPACE  POD  NRI-CNI  VS MULTUS  NETWORKS")
	assert.Regexp(t, `team-a +db +attach +same +team-a/storage@net1, team-a/local@net2`, stdout, "the ConfigMap's network")
	assert.Contains(t, stdout, "2 pods ask for networks (k8s.v1.cni.cncf.io/networks), of 3 listed (0 finished, not judged)")
	assert.Contains(t, stdout, "  2 would work unchanged\n  0 would differ\n  0 fail with Multus too\n")
}

func TestMigrateCheckDiffersExitsThree(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nri.conf")
	require.NoError(t, os.WriteFile(conf, []byte(checkConf+"confDir: "+filepath.Join(dir, "none")+"\n"), 0o644))
	code, stdout, stderr := runCheck(t, checkCluster(), "--config", conf, "-o", "json")
	assert.Equal(t, exitDiffers, code)
	assert.Contains(t, stderr, "none", "a confDir that is not there is a warning")
	assert.Contains(t, stderr, "--conf-dir")
	var rep migrate.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Len(t, rep.Pods, 2)
	assert.Equal(t, "db", rep.Pods[0].Name)
	assert.Equal(t, migrate.Refuse, rep.Pods[0].Verdict)
	assert.Equal(t, migrate.ReasonUnknownNetwork, rep.Pods[0].Reason)
	assert.Equal(t, migrate.Same, rep.Pods[1].Multus)
	assert.Equal(t, map[migrate.Reason]int{migrate.ReasonUnknownNetwork: 1}, rep.Summary.ByReason)

	// --conf-dir supplies the network.
	nets := filepath.Join(dir, "net.d")
	require.NoError(t, os.Mkdir(nets, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(nets, "local.conf"), []byte(`{"cniVersion":"1.0.0","name":"local","type":"bridge"}`), 0o644))
	code, _, stderr = runCheck(t, checkCluster(), "--config", conf, "--conf-dir", nets)
	assert.Equal(t, 0, code, stderr)
}

func TestMigrateCheckErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster *fakeCluster
		args    []string
		code    int
		want    string
	}{
		{"build without an API client", nil, nil, 1, "run nri-cni-k8s migrate-check"},
		{"bad output", checkCluster(), []string{"-o", "yaml"}, 1, `-o "yaml": want table or json`},
		{"stray args", checkCluster(), []string{"pods"}, 1, "unexpected arguments"},
		{"bad chunk size", checkCluster(), []string{"--chunk-size", "0"}, 1, "--chunk-size 0"},
		{"bad configmap name", checkCluster(), []string{"--from-configmap", "nri-cni"}, 1, "want NAMESPACE/NAME"},
		{"missing configmap", checkCluster(), []string{"--from-configmap", "kube-system/other"}, 1, "ConfigMap kube-system/other"},
		{"configmap without nri.conf", &fakeCluster{configMaps: map[string]map[string]string{"a/b": {"x": "y"}}},
			[]string{"--from-configmap", "a/b"}, 1, "ConfigMap a/b: not a ConfigMap with a nri.conf key"},
		{"bad nri.conf in the configmap", &fakeCluster{configMaps: map[string]map[string]string{"a/b": {"nri.conf": "network: [x]\n"}}},
			[]string{"--from-configmap", "a/b"}, 1, `ConfigMap a/b: nri.conf:`},
		{"missing config file", checkCluster(), []string{"--config", "/nonexistent/nri.conf"}, 1, "/nonexistent/nri.conf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCheck(t, tc.cluster, tc.args...)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, stderr, tc.want)
		})
	}
}
