package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKubernetesSectionAbsentMeansNoKubernetesMode(t *testing.T) {
	cfg, err := Parse([]byte("podSelection: true\n"))
	require.NoError(t, err)
	assert.Nil(t, cfg.Kubernetes)
	assert.False(t, cfg.Kubernetes.NPWG())
	assert.False(t, cfg.Kubernetes.SharesNamespace("x"))
	assert.Equal(t, DefaultKubernetesNetworkName, cfg.Kubernetes.PrimaryNetworkName())
}

func TestKubernetesSectionParses(t *testing.T) {
	cfg, err := Parse([]byte(`
kubernetes:
  kubeconfig: /etc/nri-cni/kubeconfig
  nodeName: node-1.example
  sharedNamespaces: [shared-nets, infra]
  npwgAnnotation: true
  defaultNetworkName: kindnet
`))
	require.NoError(t, err)
	require.NotNil(t, cfg.Kubernetes)
	k := cfg.Kubernetes
	assert.Equal(t, "/etc/nri-cni/kubeconfig", k.Kubeconfig)
	assert.Equal(t, "node-1.example", k.NodeName)
	assert.True(t, k.NPWG())
	assert.True(t, k.SharesNamespace("infra"))
	assert.False(t, k.SharesNamespace("default"))
	assert.Equal(t, "kindnet", k.PrimaryNetworkName())

	empty, err := Parse([]byte("kubernetes: {}\n"))
	require.NoError(t, err)
	require.NotNil(t, empty.Kubernetes, "an empty section still turns Kubernetes mode on (in-cluster)")
	assert.False(t, empty.Kubernetes.NPWG(), "the NPWG annotation is opt-in")
}

func TestKubernetesSectionErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ in, key string }{
		{"kubernetes: {kubeconfig: relative/kubeconfig}", "kubernetes.kubeconfig"},
		{"kubernetes: {nodeName: Node_1}", "kubernetes.nodeName"},
		{"kubernetes: {sharedNamespaces: [ok, Not_OK]}", "kubernetes.sharedNamespaces[1]"},
		{"kubernetes: {sharedNamespaces: [a, a]}", "kubernetes.sharedNamespaces[1]"},
		{"kubernetes: {npwgAnnotation: sometimes}", "npwgAnnotation"},
		{"kubernetes: {defaultNetworkName: 'a b'}", "kubernetes.defaultNetworkName"},
		{"kubernetes: {bogus: 1}", "kubernetes.bogus"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.key)
		})
	}
}
