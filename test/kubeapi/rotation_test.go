package kubeapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
)

// checkTokenRotation: nri-cni's clients, built by kube.NewClients, read
// their bearer token from a file — in-cluster the projected ServiceAccount
// token, here a kubeconfig's tokenFile: client-go reads both through the
// same cached file token source, which re-reads the file once a minute. The
// kubelet rotates that file by writing a new one into place. Tested the hard
// way: the file replaced under a running StatusWriter and the old token
// revoked at once (its bound pod deleted): writes fail with 401 until
// client-go re-reads the file, are retried with backoff meanwhile, and land
// with the new token — within about a minute, without a restart. (A real
// rotation is gentler: the kubelet replaces the token well before the old
// one expires, so there is no failing window at all.)
func checkTokenRotation(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity, f *fixture) {
	admin := c.Client
	// Tokens bound to pods on this node, as the kubelet's projected ones.
	holder := func(prefix string) (pod, token string) {
		p := createPod(ctx, t, admin, id.Namespace, harness.RandomName(prefix), c.NodeName, id.ServiceAccount)
		t.Cleanup(func() {
			_ = admin.CoreV1().Pods(id.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		})
		token, err := TokenFor(ctx, admin, id.Namespace, id.ServiceAccount, p)
		require.NoError(t, err)
		return p.Name, token
	}
	oldPod, oldToken := holder("nri-cni-old-")
	_, newToken := holder("nri-cni-new-")

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(oldToken), 0o600))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: c.RESTConfig.Host, CertificateAuthority: c.RESTConfig.CAFile,
		CertificateAuthorityData: c.RESTConfig.CAData}
	kc.AuthInfos["nri-cni"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "nri-cni"}
	kc.CurrentContext = "c"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))

	clients, err := kube.NewClients(&config.KubernetesConfig{Kubeconfig: kubeconfig, NodeName: c.NodeName}, os.Getenv)
	require.NoError(t, err)
	log := logrus.New()
	var buf syncBuffer
	log.SetOutput(&buf)
	log.SetLevel(logrus.DebugLevel)
	defer func() { t.Logf("kube/ log:\n%s", buf.String()) }()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := kube.Start(runCtx, clients, logrus.NewEntry(log),
		kube.Options{Status: kube.StatusOptions{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}})

	write := func(ip string) string {
		pn := attach.PodNetworks{Namespace: f.ns, Name: f.here.Name, UID: string(f.here.UID), Networks: []attach.NetworkStatus{
			{Name: "default", Interface: "eth0", IPs: []string{ip}, Default: true}}}
		want, err := kube.NetworkStatusJSON(pn)
		require.NoError(t, err)
		m.Status.PodNetworks(pn)
		return want
	}
	landed := func(want string) func() bool {
		return func() bool {
			p, err := admin.CoreV1().Pods(f.ns).Get(ctx, f.here.Name, metav1.GetOptions{})
			return err == nil && p.Annotations[kube.AnnotationNetworkStatus] == want
		}
	}
	want := write("10.0.0.21")
	require.Eventually(t, landed(want), waitFor, 100*time.Millisecond, "status written with the first token")

	// The kubelet's rotation: a new token in place, the old one revoked (its
	// bound pod deleted at once).
	require.NoError(t, writeAtomic(tokenFile, []byte(newToken)))
	zero := int64(0)
	require.NoError(t, admin.CoreV1().Pods(id.Namespace).Delete(ctx, oldPod, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	require.Eventually(t, func() bool {
		_, err := WhoAmI(ctx, AsToken(c.RESTConfig, oldToken))
		return apierrors.IsUnauthorized(err)
	}, waitFor, 100*time.Millisecond, "the old token is refused once its pod is gone")

	rotated := time.Now()
	want = write("10.0.0.22")
	require.Eventually(t, landed(want), waitFor, 100*time.Millisecond, "status written after the token file was replaced")
	t.Logf("network-status written %s after the token rotated (the old one revoked)", time.Since(rotated).Round(time.Millisecond))
}

// writeAtomic replaces path's content by renaming a new file over it, as the
// kubelet's atomic writer updates projected files.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
