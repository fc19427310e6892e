package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
)

// checkNADCacheBudget (issue 41, item 1): kube/'s NAD cache as nri-cni's
// identity, with a small kubernetes.maxNADCacheBytes, on the real API
// server: one namespace's flood of NADs uses the budget up, and the NAD of
// another namespace (f.ns's "net", checkRBAC's) still resolves while the
// flood's last NADs by name fail naming the key; once most of the flood is
// deleted, the dropped NADs are read back from the API server (a GET each,
// which nri-cni's ClusterRole allows) and resolve again.
func checkNADCacheBudget(ctx context.Context, t *testing.T, c *cluster.Cluster, f *fixture) {
	admin, err := nadclient.NewForConfig(c.RESTConfig)
	require.NoError(t, err)
	flood := harness.RandomName("kubeapi-flood-")
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flood}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), flood, metav1.DeleteOptions{}) })
	const n = 10
	for i := range n {
		// ~12 KB of config: ~38 KB each as the cache counts it.
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"flood-%02d","type":"bridge","bridge":"nad-kubeapi0","pad":"%s"}`,
			i, strings.Repeat("x", 12_000))
		_, err := admin.K8sCniCncfIoV1().NetworkAttachmentDefinitions(flood).Create(ctx, &nadv1.NetworkAttachmentDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-%02d", i), Namespace: flood},
			Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: conf}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	m, buf, stop := startKube(ctx, t, c, f, kube.Options{MaxNADCacheBytes: 200_000})
	defer stop()
	resolve := func(ns, name string) error {
		_, err := m.Source.Network(plan.NADRef{Namespace: ns, Name: name})
		return err
	}
	var dropped []string
	require.Eventually(t, func() bool {
		dropped = nil
		for i := range n {
			if err := resolve(flood, fmt.Sprintf("flood-%02d", i)); errors.Is(err, kube.ErrNADCacheFull) {
				dropped = append(dropped, fmt.Sprintf("flood-%02d", i))
			}
		}
		// Each flood NAD counts ~38.7 KB (its config three times, 2 KiB,
		// 320 bytes for its one JSON object): the share the other
		// namespace leaves (~197 KB) holds 5.
		return len(dropped) == n-5
	}, waitFor, 100*time.Millisecond, "the budget drops the flood's last 5 by name: %v", &dropped)
	t.Logf("dropped: %v", dropped)
	require.NoError(t, resolve(f.ns, "net"), "another namespace's NAD still resolves")
	err = resolve(flood, dropped[len(dropped)-1])
	assert.Contains(t, err.Error(), "kubernetes.maxNADCacheBytes (200000 bytes) is used up")
	assert.Contains(t, err.Error(), "namespace "+flood+"'s NADs count")
	assert.Equal(t, "flood-05", dropped[0], "the last by name go first")

	for i := range n - 2 {
		require.NoError(t, admin.K8sCniCncfIoV1().NetworkAttachmentDefinitions(flood).Delete(ctx, fmt.Sprintf("flood-%02d", i), metav1.DeleteOptions{}))
	}
	require.Eventually(t, func() bool {
		return resolve(flood, fmt.Sprintf("flood-%02d", n-2)) == nil && resolve(flood, fmt.Sprintf("flood-%02d", n-1)) == nil
	}, waitFor, 100*time.Millisecond, "the dropped NADs are read back once the budget has room")
	assert.NoError(t, resolve(f.ns, "net"))
	logged := buf.String()
	assert.Contains(t, logged, "dropped from this node's NAD cache")
	assert.Contains(t, logged, "back in this node's NAD cache")
}
