package kubeapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
)

// testHelmInstall installs the chart in a namespace of its own (after
// testBase removed deploy/base's objects), with the DRA driver on at the
// cluster's kubelet, checks what it created — the DaemonSet's pod too, with
// an image that is not there (pullPolicy Never): its ServiceAccount,
// NODE_NAME and mounts are what matter here — runs the same identity checks
// against the chart's RBAC and policies, and uninstalls.
func testHelmInstall(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	h := newHelm(t)
	ns := harness.RandomName("nri-cni-helm-")
	const release = "nri-cni"
	start := time.Now()
	out, err := h.run(ctx, "install", release, ChartDir(), "--kubeconfig", c.Kubeconfig,
		"--namespace", ns, "--create-namespace",
		"--set", "image.repository=localhost/nri-cni,image.tag=dev,image.pullPolicy=Never",
		"--set", "kubernetes.enabled=true",
		// The DRA driver on (the default), at this cluster's kubelet.
		"--set", "kubernetes.dra.enabled=true,kubernetes.dra.kubeletDir="+c.KubeletRootDir)
	require.NoError(t, err)
	t.Logf("helm install (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_, err := h.run(context.Background(), "uninstall", release, "--kubeconfig", c.Kubeconfig, "--namespace", ns, "--wait")
			assert.NoError(t, err)
		}
		assert.NoError(t, c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}))
	})
	out, err = c.Kubectl(ctx, "get", "crd,clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding,deviceclass",
		"-l", "app.kubernetes.io/instance="+release)
	require.NoError(t, err)
	t.Logf("cluster-scoped objects of the release:\n%s", out)
	// The required-plugins policy, in the version the server serves.
	out, err = c.Kubectl(ctx, "get", "mutatingadmissionpolicy,mutatingadmissionpolicybinding", "-l", "app.kubernetes.io/instance="+release,
		"-o", `jsonpath={range .items[*]}{.apiVersion} {.kind} {.metadata.name}{"\n"}{end}`)
	require.NoError(t, err)
	t.Logf("required-plugins policy of the release:\n%s", out)
	assert.Equal(t, 2, strings.Count(out, release+"-required-plugins"), "policy and binding installed")
	out, err = c.Kubectl(ctx, "-n", ns, "get", "serviceaccount,configmap,daemonset", "-l", "app.kubernetes.io/instance="+release)
	require.NoError(t, err)
	t.Logf("namespaced objects of the release:\n%s", out)
	_, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m",
		"crd/network-attachment-definitions.k8s.cni.cncf.io")
	require.NoError(t, err, "the CRD from crds/")

	// The DaemonSet controller creates the pod: the ServiceAccount exists,
	// NODE_NAME comes from the downward API, the token is mounted.
	var dsPod corev1.Pod
	require.Eventually(t, func() bool {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName == "" {
			return false // not created, or not bound to the node yet
		}
		dsPod = pods.Items[0]
		return true
	}, waitFor, 200*time.Millisecond, "the DaemonSet never created its pod on the node")
	assert.Equal(t, release, dsPod.Spec.ServiceAccountName)
	assert.Equal(t, c.NodeName, dsPod.Spec.NodeName)
	hostPaths := map[string]bool{}
	for _, v := range dsPod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = true
		}
	}
	for _, p := range []string{c.KubeletRootDir + "/plugins/" + dra.DriverName, c.KubeletRootDir + "/plugins_registry"} {
		assert.True(t, hostPaths[p], "the DRA driver's mount of the kubelet's %s", p)
	}
	_, err = c.Client.ResourceV1().DeviceClasses().Get(ctx, dra.DriverName, metav1.GetOptions{})
	require.NoError(t, err, "the DeviceClass")

	checkIdentity(ctx, t, c, identity{Namespace: ns, ServiceAccount: release,
		Policy: release + "-network-status", PolicyBinding: release + "-network-status",
		SlicePolicy: release + "-dra-slices", ClaimPolicy: release + "-dra-claim-status"})

	start = time.Now()
	out, err = h.run(ctx, "uninstall", release, "--kubeconfig", c.Kubeconfig, "--namespace", ns, "--wait")
	require.NoError(t, err)
	uninstalled = true
	t.Logf("helm uninstall (%s): %s", time.Since(start).Round(time.Millisecond), out)
	admin := c.Client
	for what, get := range map[string]func() error{
		"ClusterRole": func() error {
			_, err := admin.RbacV1().ClusterRoles().Get(ctx, release, metav1.GetOptions{})
			return err
		},
		"ClusterRoleBinding": func() error {
			_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, release, metav1.GetOptions{})
			return err
		},
		"ValidatingAdmissionPolicy": func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, release+"-network-status", metav1.GetOptions{})
			return err
		},
		"ValidatingAdmissionPolicyBinding": func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, release+"-network-status", metav1.GetOptions{})
			return err
		},
		"DRA ResourceSlice policy": func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, release+"-dra-slices", metav1.GetOptions{})
			return err
		},
		"DRA claim status policy binding": func() error {
			_, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, release+"-dra-claim-status", metav1.GetOptions{})
			return err
		},
		"DeviceClass": func() error {
			_, err := admin.ResourceV1().DeviceClasses().Get(ctx, dra.DriverName, metav1.GetOptions{})
			return err
		},
		"ServiceAccount": func() error {
			_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, release, metav1.GetOptions{})
			return err
		},
		"ConfigMap": func() error {
			_, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, release, metav1.GetOptions{})
			return err
		},
		"DaemonSet": func() error {
			_, err := admin.AppsV1().DaemonSets(ns).Get(ctx, release, metav1.GetOptions{})
			return err
		},
	} {
		assert.True(t, apierrors.IsNotFound(get()), "%s removed by helm uninstall", what)
	}
	out, err = c.Kubectl(ctx, "get", "mutatingadmissionpolicy,mutatingadmissionpolicybinding", "-l", "app.kubernetes.io/instance="+release, "-o", "name")
	assert.NoError(t, err)
	assert.NotContains(t, out, release+"-required-plugins", "required-plugins policy removed by helm uninstall")
	out, err = c.Kubectl(ctx, "get", "crd", "network-attachment-definitions.k8s.cni.cncf.io", "-o", "name")
	assert.NoError(t, err, "helm keeps CRDs from crds/ on uninstall (NADs survive)")
	t.Logf("after uninstall: %s", out)
}
