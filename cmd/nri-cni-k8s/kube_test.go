package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cmd/internal/cli"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube"
)

// runApp runs the command line of this build (with Kubernetes mode).
func runApp(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "PATH" {
			return "/usr/bin"
		}
		return env[k]
	}
	code := cli.Run(context.Background(), cli.IO{Stdin: bytes.NewReader(nil), Stdout: &stdout, Stderr: &stderr, Getenv: getenv},
		args, &cli.Kube{Start: startKubernetes, Cluster: readCluster})
	return code, stdout.String(), stderr.String()
}

func TestRunKubernetesSectionErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	noNode := write("nonode.conf", "stateDir: "+filepath.Join(dir, "state")+"\nkubernetes: {kubeconfig: "+filepath.Join(dir, "kubeconfig")+"}\n")
	noKubeconfig := write("nokc.conf", "kubernetes: {nodeName: node-1, kubeconfig: "+filepath.Join(dir, "missing")+"}\n")
	for _, tc := range []struct {
		name, conf string
		want       []string
	}{
		{"no node name", noNode, []string{"kubernetes:", "kubernetes.nodeName", "NODE_NAME"}},
		{"kubeconfig missing", noKubeconfig, []string{"kubernetes:", "missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runApp(t, nil, "run", "--config", tc.conf)
			assert.Equal(t, 1, code)
			for _, w := range tc.want {
				assert.Contains(t, stderr, w)
			}
		})
	}
}

func TestStartKubernetes(t *testing.T) {
	log := logrus.NewEntry(logrus.New())
	getenv := func(k string) string {
		if k == kube.NodeNameEnv {
			return "node-1"
		}
		return ""
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600))
	cfg := config.Default()
	cfg.Kubernetes = &config.KubernetesConfig{Kubeconfig: kc, NPWGAnnotation: true}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	km, err := startKubernetes(ctx, cfg, getenv, log)
	require.NoError(t, err)
	assert.NotNil(t, km.NADs, "a NetworkAttachmentDefinition source")
	assert.NotNil(t, km.Sink, "a status sink")
	assert.NotNil(t, km.Multus, "the Multus check")
	require.NotNil(t, km.Start, "starts hot-plug's pod watcher once the engine exists (when hotplug is on)")
	assert.Nil(t, km.Policy, "MultiNetworkPolicy off: no policy source")
	assert.Nil(t, km.Firewall, "MultiNetworkPolicy off: no firewall")

	// MultiNetworkPolicy on: the engine gets the source and the firewall,
	// and readiness waits for the caches (the API server is unreachable).
	cfg.Kubernetes.MultiNetworkPolicy = &config.MultiNetworkPolicyConfig{Enabled: true}
	km, err = startKubernetes(ctx, cfg, getenv, log)
	require.NoError(t, err)
	assert.NotNil(t, km.Policy, "a policy source")
	assert.NotNil(t, km.Firewall, "a firewall")
	assert.Error(t, km.Ready())
	clients, err := kube.NewClients(cfg.Kubernetes, getenv)
	require.NoError(t, err)
	pol, err := startPolicy(cfg.Kubernetes, clients, &kube.Mode{}, log)
	require.NoError(t, err)
	assert.ErrorContains(t, pol.ready(), "MultiNetworkPolicy caches have not synced")
}
