package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nri-cni/nri-cni/migrate"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

// migrateRules is all `nri-cni-k8s migrate-check` needs (docs/kubernetes.md).
var migrateRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"network-attachment-definitions"}, Verbs: []string{"list"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
}

// testMigrateCheck runs the nri-cni-k8s binary's migrate-check against the
// real API server, as a ServiceAccount that may list pods and NADs and get
// ConfigMaps and nothing else, judging NADs and pods written the Multus way
// (Pending pods nothing schedules) with deploy/base's ConfigMap.
func testMigrateCheck(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	// Built as make build and the image build it (the same build cache).
	bin := filepath.Join(t.TempDir(), "nri-cni-k8s")
	require.NoError(t, build.GoBuild(ctx, deploy.RepoRoot(), bin, "test", runtime.GOARCH))
	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	ensureCRD(ctx, t, c, b)
	admin := c.Client
	nadAdmin, err := nadclient.NewForConfig(c.RESTConfig)
	require.NoError(t, err)

	team, other := harness.RandomName("mig-a-"), harness.RandomName("mig-b-")
	for _, ns := range []string{team, other} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	// deploy/base's ConfigMap (nri.conf and the network "secondary"), as the
	// DaemonSet reads it.
	cm := b.ConfigMap.DeepCopy()
	cm.Namespace, cm.ResourceVersion = team, ""
	_, err = admin.CoreV1().ConfigMaps(team).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)

	for _, n := range []struct{ ns, name, config string }{
		{team, "storage", `{"cniVersion":"1.0.0","name":"storage","plugins":[{"type":"bridge","bridge":"nad-storage",` +
			`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.251.1.0/24"}]]}},{"type":"tuning","capabilities":{"mac":true}}]}`},
		{team, "data", `{"cniVersion":"1.0.0","name":"data","type":"bridge","bridge":"nad-data"}`},
		{team, "secondary", ""},
		{team, "uplink", `{"cniVersion":"1.0.0","name":"uplink","type":"macvlan","master":"eth0"}`},
		{other, "private", `{"cniVersion":"1.0.0","name":"private","type":"bridge","bridge":"nad-private"}`},
	} {
		_, err := nadAdmin.K8sCniCncfIoV1().NetworkAttachmentDefinitions(n.ns).Create(ctx, &nadv1.NetworkAttachmentDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: n.name}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: n.config}}, metav1.CreateOptions{})
		require.NoError(t, err, "NAD %s/%s", n.ns, n.name)
	}
	tooMany := strings.TrimSuffix(strings.Repeat("storage, ", 33), ", ")
	pods := map[string]string{
		"web":       "storage, data@eth1",
		"positions": "storage, data@eth1, secondary",
		"routes":    `[{"name":"storage"},{"name":"data","default-route":[]}]`,
		"clash":     "storage, data@net1",
		"json":      `[{"name":"storage","interface":"data0","mac":"02:00:00:00:00:11"},{"name":"data","namespace":"` + team + `","interface":"eth9"}]`,
		"cross":     other + "/private",
		"missing":   "nope",
		"policy":    "uplink",
		"ips":       `[{"name":"storage","ips":["10.251.1.7/24"]}]`,
		"too-many":  tooMany,
		"vm":        `[{"name":"storage","ipam-claim-reference":"vm-a.storage"}]`,
		"host":      "storage",
		"finished":  "storage",
		"plain":     "",
		// Multus's other eth0: refused where nri-cni attaches, else it
		// differs all the same (the pod starts on the cluster network).
		"calico":      "storage",
		"calico-only": "",
	}
	for name, networks := range pods {
		p := pendingPod(team, name, networks)
		switch name {
		case "plain":
			p.Annotations = nil
		case "calico":
			p.Annotations[plan.AnnotationMultusDefaultNetwork] = "kube-system/calico"
		case "calico-only":
			p.Annotations = map[string]string{plan.AnnotationMultusDefaultNetwork: "kube-system/calico"}
		case "host":
			p.Spec.HostNetwork = true
		}
		created, err := admin.CoreV1().Pods(team).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err, "pod %s", name)
		if name == "finished" {
			created.Status.Phase = corev1.PodSucceeded
			_, err = admin.CoreV1().Pods(team).UpdateStatus(ctx, created, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
	}

	kubeconfig := readOnlyKubeconfig(ctx, t, c, team)
	run := func(args ...string) (int, string, string) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"migrate-check", "--kubeconfig", kubeconfig,
			"--from-configmap", team + "/nri-cni", "--chunk-size", "3"}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			require.NoError(t, err)
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}

	code, table, stderr := run("-n", team)
	t.Logf("migrate-check -n %s (exit %d):\n%s%s", team, code, table, stderr)
	assert.Equal(t, 3, code, "some pods differ")
	assert.Empty(t, stderr)
	for _, row := range []string{
		`web +attach +same +` + team + `/storage@net1, ` + team + `/data@eth1 +- +-`,
		`positions +attach +same +.*/data@eth1, ` + team + `/secondary@net3 +- +-`,
		`routes +attach +differs +.*/data@net2 +default-route +element 2`,
		`clash +refuse +fails-with-multus-too +- +interface-name-refused +.*"net1" is also element 1's`,
		`json +attach +same +` + team + `/storage@data0, ` + team + `/data@eth9`,
		`cross +refuse +differs +- +namespace-isolation +k8s.v1.cni.cncf.io/networks element 1 \(` + other + `/private\)`,
		`missing +refuse +fails-with-multus-too +- +no-such-nad +.*no such NetworkAttachmentDefinition ` + team + `/nope`,
		`policy +refuse +differs +- +nad-policy +.*kubernetes.nadPolicy.default.masters`,
		`ips +refuse +differs +- +capability-not-allowed +.*podCapabilities`,
		`too-many +refuse +differs +- +limits +.*33 networks, more than limits.maxNetworksPerPod`,
		`vm +attach +same +` + team + `/storage@net1 +- +ignored: .*"vm-a.storage"`,
		`host +ignore +same +- +host-network`,
		`calico +refuse +differs +- +default-network +annotation v1.multus-cni.io/default-network="kube-system/calico" refused`,
		`calico-only +ignore +differs +- +default-network +.*nri-cni never replaces eth0, so the pod starts on the cluster network`,
	} {
		assert.Regexp(t, `(?m)^`+team+` +`+row, table)
	}
	assert.NotRegexp(t, `(?m)^\S+ +(finished|plain) `, table, "a finished pod and one without the annotation are not judged")
	assert.Contains(t, table, "14 pods ask for networks (k8s.v1.cni.cncf.io/networks), of 16 listed (1 finished, not judged)")
	assert.Contains(t, table, "  5 would work unchanged\n")
	assert.Contains(t, table, "  7 would differ: capability-not-allowed 1, default-network 2, default-route 1, limits 1, nad-policy 1, namespace-isolation 1\n")
	assert.Contains(t, table, "  2 fail with Multus too: interface-name-refused 1, no-such-nad 1\n")
	assert.Regexp(t, `(?m)^`+team+` +uplink +kubernetes\.nadPolicy\.default\.masters +spec\.config\.master: "eth0"`, table, "the NAD the policy refuses")
	assert.Contains(t, table, "\n1 of 4 NetworkAttachmentDefinitions refused by kubernetes.nadPolicy: kubernetes.nadPolicy.default.masters 1\n")

	// Every namespace, as JSON: the same verdicts.
	code, out, stderr := run("-o", "json")
	require.Equal(t, 3, code, stderr)
	var rep migrate.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	got := map[string]migrate.PodReport{}
	for _, p := range rep.Pods {
		if p.Namespace == team {
			got[p.Name] = p
		}
	}
	require.Len(t, got, 14)
	assert.Equal(t, []migrate.Network{{NAD: team + "/storage", Network: "storage", Interface: "net1"},
		{NAD: team + "/data", Network: "data", Interface: "eth1"},
		{NAD: team + "/secondary", Network: "secondary", Interface: "net3"}}, got["positions"].Networks,
		"named by position, as Multus names them")
	assert.Equal(t, []string{"mac"}, got["json"].Networks[0].Capabilities)
	assert.Equal(t, migrate.ReasonNADPolicy, got["policy"].Reason)
	assert.Equal(t, migrate.FailsBoth, got["missing"].Multus)
	assert.Equal(t, migrate.ReasonDefaultNetwork, got["calico-only"].Reason)
	assert.Equal(t, 14, rep.Summary.Pods, "no other namespace's pod asks for networks")
	assert.Len(t, got["vm"].Ignored, 1)

	// The identity needs exactly that: without list on pods it cannot run,
	// and says what it was refused.
	_, err = admin.RbacV1().ClusterRoles().Patch(ctx, "nri-cni-migrate-check-"+team, types.MergePatchType,
		[]byte(`{"rules":[{"apiGroups":["k8s.cni.cncf.io"],"resources":["network-attachment-definitions"],"verbs":["list"]},`+
			`{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		code, _, stderr = run("-n", team)
		return code == 1
	}, waitFor, 200*time.Millisecond, "still listed pods without the right to")
	t.Logf("without list pods: %s", stderr)
	assert.Contains(t, stderr, `listing pods: pods is forbidden: User "system:serviceaccount:`+team+`:migrate-check" cannot list resource "pods"`)
}

// pendingPod is a pod no scheduler places (its schedulerName runs nowhere),
// so no kubelet ever runs it.
func pendingPod(ns, name, networks string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{plan.AnnotationNPWGNetworks: networks}},
		Spec: corev1.PodSpec{SchedulerName: "nri-cni-migrate-check-nowhere", TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever}}},
	}
}

// ensureCRD applies deploy/base's NAD CRD unless it is there (the Helm
// chart's stays after its uninstall), and removes it afterwards if it
// applied it.
func ensureCRD(ctx context.Context, t *testing.T, c *cluster.Cluster, b *deploy.Base) {
	if _, err := c.Kubectl(ctx, "get", "crd/"+b.CRD.Name); err == nil {
		return
	}
	path := filepath.Join(b.Dir, "crd-networkattachmentdefinitions.yaml")
	_, err := c.Kubectl(ctx, "apply", "-f", path)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := c.Kubectl(context.Background(), "delete", "--ignore-not-found", "--wait", "-f", path)
		assert.NoError(t, err)
	})
	_, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m", "crd/"+b.CRD.Name)
	require.NoError(t, err)
}

// readOnlyKubeconfig creates ServiceAccount ns/migrate-check bound to a
// ClusterRole of migrateRules and writes a kubeconfig with its token.
func readOnlyKubeconfig(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) string {
	admin := c.Client
	name := "nri-cni-migrate-check-" + ns
	_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "migrate-check"}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: migrateRules},
		metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "migrate-check"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	token, err := TokenFor(ctx, admin, ns, "migrate-check", nil)
	require.NoError(t, err)
	who, err := WhoAmI(ctx, AsToken(c.RESTConfig, token))
	require.NoError(t, err)
	require.Equal(t, "system:serviceaccount:"+ns+":migrate-check", who.Username)

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.RESTConfig.Host, CertificateAuthority: c.RESTConfig.CAFile,
		CertificateAuthorityData: c.RESTConfig.CAData}
	cfg.AuthInfos["migrate-check"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "migrate-check"}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}
