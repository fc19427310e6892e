package kubeapi

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

const waitFor = 2 * time.Minute

// identity is a deployment of nri-cni's ServiceAccount, RBAC and policies.
// SlicePolicy and ClaimPolicy are the DRA ones (each bound by a binding of
// its name).
type identity struct {
	Namespace, ServiceAccount, Policy, PolicyBinding string
	SlicePolicy, ClaimPolicy                         string
}

func (id identity) username() string {
	return "system:serviceaccount:" + id.Namespace + ":" + id.ServiceAccount
}

// denial is how the API server words a denial by the policy.
func (id identity) denial() string {
	return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request", id.Policy, id.PolicyBinding)
}

// denialBy is a denial by policy, bound by the binding of its name.
func (id identity) denialBy(policy string) string {
	return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request", policy, policy)
}

// TestKubeAPI runs one real cluster for the package: deploy/base's RBAC,
// policy and CRD first, then the Helm chart on the same API server.
func TestKubeAPI(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Opts{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
	t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))
	v, err := c.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	t.Logf("API server %s", v.GitVersion)
	require.Equal(t, c.Tools.Version, v.GitVersion, "the version test/tools/install-k8s.sh built")

	t.Run("Base", func(t *testing.T) { testBase(ctx, t, c) })
	t.Run("Helm", func(t *testing.T) { testHelmInstall(ctx, t, c) })
	t.Run("MigrateCheck", func(t *testing.T) { testMigrateCheck(ctx, t, c) })
}

// testBase applies deploy/base without its DaemonSet and checks what nri-cni's
// identity may and may not do.
func testBase(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	// Before 1.36 MutatingAdmissionPolicy is v1beta1: deploy/base-1.34 is
	// deploy/base for those (TestRequiredPluginsPolicy tests the policy).
	dir, v1MAP := b.Dir, serverMinor(t, c) >= 36
	if !v1MAP {
		dir = filepath.Join(filepath.Dir(b.Dir), "base-1.34")
	}
	out, err := c.Kubectl(ctx, "apply", "-k", dir, "--dry-run=server")
	require.NoError(t, err, "the whole of %s applies", dir)
	t.Logf("kubectl apply -k %s --dry-run=server:\n%s", dir, out)

	args := []string{"apply"}
	for _, r := range b.Kustomization.Resources {
		if r != "daemonset.yaml" && (v1MAP || r != "required-plugins-policy.yaml") {
			args = append(args, "-f", filepath.Join(b.Dir, r))
		}
	}
	start := time.Now()
	out, err = c.Kubectl(ctx, args...)
	require.NoError(t, err)
	t.Logf("kubectl %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	t.Cleanup(func() {
		del := append([]string{"delete", "--ignore-not-found", "--wait"}, args[1:]...)
		_, err := c.Kubectl(context.Background(), del...)
		assert.NoError(t, err)
	})
	_, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m", "crd/"+b.CRD.Name)
	require.NoError(t, err)

	id := identity{Namespace: b.ServiceAccount.Namespace, ServiceAccount: b.ServiceAccount.Name,
		Policy: b.Policy.Name, PolicyBinding: b.PolicyBinding.Name,
		SlicePolicy: b.SlicePolicy.Name, ClaimPolicy: b.ClaimPolicy.Name}
	f := checkIdentity(ctx, t, c, id)
	t.Run("TokenRotation", func(t *testing.T) { checkTokenRotation(ctx, t, c, id, f) })
}

// fixture is what checkIdentity works on.
type fixture struct {
	ns        string
	here      *corev1.Pod // on the cluster's node
	there     *corev1.Pod // on another node (a Node object without a kubelet)
	otherNode string
	as        kubernetes.Interface // nri-cni's identity, node-bound token
	asCfg     *rest.Config
}

func newFixture(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity) *fixture {
	f := &fixture{ns: harness.RandomName("kubeapi-"), otherNode: harness.RandomName("fake-node-")}
	admin := c.Client
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, admin.CoreV1().Namespaces().Delete(context.Background(), f.ns, metav1.DeleteOptions{}))
	})
	_, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.otherNode}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, admin.CoreV1().Nodes().Delete(context.Background(), f.otherNode, metav1.DeleteOptions{}))
	})
	f.here = createPod(ctx, t, admin, f.ns, "here", c.NodeName, "")
	f.there = createPod(ctx, t, admin, f.ns, "there", f.otherNode, "")
	// The pod the token is bound to, as a DaemonSet pod's projected token is.
	daemonPod := createPod(ctx, t, admin, id.Namespace, harness.RandomName("nri-cni-"), c.NodeName, id.ServiceAccount)
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(id.Namespace).Delete(context.Background(), daemonPod.Name, metav1.DeleteOptions{})
	})
	token, err := TokenFor(ctx, admin, id.Namespace, id.ServiceAccount, daemonPod)
	require.NoError(t, err)
	cfg := AsToken(c.RESTConfig, token)
	who, err := WhoAmI(ctx, cfg)
	require.NoError(t, err)
	t.Logf("node-bound token: user %s, extra %v", who.Username, who.Extra)
	require.Equal(t, id.username(), who.Username)
	require.Equal(t, []string{c.NodeName}, []string(who.Extra[NodeNameExtra]), "the token's node claim")
	f.asCfg = cfg
	f.as, err = kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return f
}

func createPod(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns, name, node, sa string) *corev1.Pod {
	t.Helper()
	zero := int64(0)
	automount := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "kubeapi"},
			Annotations: map[string]string{"keep": "1"}},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: &automount,
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	p, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err, "pod %s/%s", ns, name)
	return p
}

func mergePatch(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, body string) (*corev1.Pod, error) {
	return c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
}

// statusPatch sets network-status (and, with extra, more) the way nri-cni
// does: a merge patch guarded by the pod's uid.
func statusPatch(pod *corev1.Pod, value, extraMeta, extra string) string {
	return fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:%q}%s}%s}`,
		pod.UID, kube.AnnotationNetworkStatus, value, extraMeta, extra)
}

// checkIdentity: what nri-cni's identity may do, against the real API server.
func checkIdentity(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity) *fixture {
	admin := c.Client
	f := newFixture(ctx, t, c, id)
	waitTypeChecked(ctx, t, c, id.Policy)

	// The policy takes effect once the API server's admission plugin has
	// seen it: until then the patch of the other node's pod passes.
	var denied error
	applied := time.Now()
	require.Eventually(t, func() bool {
		_, denied = mergePatch(ctx, f.as, f.there, statusPatch(f.there, "[]", "", ""))
		return denied != nil
	}, waitFor, 200*time.Millisecond, "the policy never denied a patch of another node's pod")
	t.Logf("policy in effect %s after its type check", time.Since(applied).Round(time.Millisecond))
	t.Logf("other node's pod: %v", denied)
	assert.True(t, apierrors.IsForbidden(denied), "403: %v", denied)
	assert.Contains(t, denied.Error(), id.denial())
	assert.Contains(t, denied.Error(), "may patch only pods bound to that node, not a pod on node "+f.otherNode)

	const status = `[{"name":"default","interface":"eth0","ips":["10.0.0.9"],"default":true}]`
	got, err := mergePatch(ctx, f.as, f.here, statusPatch(f.here, status, "", ""))
	require.NoError(t, err, "network-status of a pod on the caller's node")
	assert.Equal(t, status, got.Annotations[kube.AnnotationNetworkStatus])
	assert.Equal(t, "1", got.Annotations["keep"])
	assert.Equal(t, f.here.Labels, got.Labels)

	for _, tc := range []struct {
		name, body, want string
	}{
		{"add a label", statusPatch(f.here, "[]", `,"labels":{"extra":"x"}`, ""), "may not change a pod's labels"},
		{"change a label", statusPatch(f.here, "[]", `,"labels":{"app":"other"}`, ""), "may not change a pod's labels"},
		{"remove a label", `{"metadata":{"labels":{"app":null}}}`, "may not change a pod's labels"},
		{"change another annotation", `{"metadata":{"annotations":{"keep":"2"}}}`,
			"may change no annotation but k8s.v1.cni.cncf.io/network-status"},
		{"add another annotation", `{"metadata":{"annotations":{"k8s.v1.cni.cncf.io/networks":"evil"}}}`,
			"may change no annotation but k8s.v1.cni.cncf.io/network-status"},
		{"remove another annotation", `{"metadata":{"annotations":{"keep":null}}}`,
			"may change no annotation but k8s.v1.cni.cncf.io/network-status"},
		{"a spec field", statusPatch(f.here, "[]", "", `,"spec":{"activeDeadlineSeconds":3600}`), "may not change a pod's spec"},
		{"a toleration", `[{"op":"add","path":"/spec/tolerations/-","value":{"key":"x","operator":"Exists","effect":"NoSchedule"}}]`,
			"may not change a pod's spec"},
		{"a container image", `[{"op":"replace","path":"/spec/containers/0/image","value":"localhost/pause:other"}]`,
			"may not change a pod's spec"},
		{"a finalizer", `{"metadata":{"finalizers":["example.com/keep"]}}`, "may not change a pod's finalizers"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			pt := types.MergePatchType
			if strings.HasPrefix(tc.body, "[") {
				pt = types.JSONPatchType
			}
			_, err := f.as.CoreV1().Pods(f.here.Namespace).Patch(ctx, f.here.Name, pt, []byte(tc.body), metav1.PatchOptions{})
			require.Error(t, err)
			t.Logf("%s: %v", tc.name, err)
			assert.True(t, apierrors.IsForbidden(err), "403: %v", err)
			assert.Contains(t, err.Error(), id.denial())
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	after, err := admin.CoreV1().Pods(f.ns).Get(ctx, f.here.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, f.here.Labels, after.Labels, "nothing denied got through")
	assert.Equal(t, "1", after.Annotations["keep"])
	assert.Nil(t, after.Spec.ActiveDeadlineSeconds)
	assert.Equal(t, f.here.Spec.Tolerations, after.Spec.Tolerations)
	assert.Equal(t, harness.PauseImage, after.Spec.Containers[0].Image)
	assert.Empty(t, after.Finalizers)

	// Everyone else is unaffected: the admin changes a label.
	_, err = mergePatch(ctx, admin, f.here, `{"metadata":{"labels":{"admin":"yes"}}}`)
	assert.NoError(t, err, "the policy matches nri-cni's ServiceAccount only")

	checkUnboundToken(ctx, t, c, id, f)
	nadAdmin, err := nadclient.NewForConfig(c.RESTConfig)
	require.NoError(t, err)
	checkRBAC(ctx, t, id, f, nadAdmin)
	checkDaemonCode(ctx, t, c, f)
	t.Run("NADCacheBudget", func(t *testing.T) { checkNADCacheBudget(ctx, t, c, f) })
	t.Run("DRA", func(t *testing.T) { checkDRA(ctx, t, c, id, f) })
	return f
}

// checkUnboundToken: a token of the same ServiceAccount without a node claim
// may patch nothing.
func checkUnboundToken(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity, f *fixture) {
	token, err := TokenFor(ctx, c.Client, id.Namespace, id.ServiceAccount, nil)
	require.NoError(t, err)
	cfg := AsToken(c.RESTConfig, token)
	who, err := WhoAmI(ctx, cfg)
	require.NoError(t, err)
	assert.NotContains(t, who.Extra, NodeNameExtra, "an unbound token has no node claim")
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = mergePatch(ctx, cs, f.here, statusPatch(f.here, "[]", "", ""))
	require.Error(t, err)
	t.Logf("token without node claim: %v", err)
	assert.True(t, apierrors.IsForbidden(err))
	assert.Contains(t, err.Error(), id.denial())
	assert.Contains(t, err.Error(), "only with a node-bound ServiceAccount token")
}

// waitTypeChecked waits for the API server's type check of the policy and
// asserts it found nothing to warn about.
func waitTypeChecked(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) {
	require.Eventually(t, func() bool {
		p, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.TypeChecking == nil || p.Status.ObservedGeneration != p.Generation {
			return false
		}
		assert.Empty(t, p.Status.TypeChecking.ExpressionWarnings, "type checking of policy %s", name)
		return true
	}, waitFor, 200*time.Millisecond, "policy %s never type-checked", name)
}
