package kubeapi

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

const nadCRDName = "network-attachment-definitions.k8s.cni.cncf.io"

// TestNADCRDOverMultus, on a real API server: Multus's CRD (v4.3.0, as
// Multus installs it) with a NAD, then deploy/base's CRD applied over it
// changes nothing the API server keeps (spec, accepted names), `kubectl get
// net-attach-def` and `kubectl get nad` list the NAD, and a NAD whose
// spec.config is larger than the 16384 characters the old CRD allowed is
// admitted. `helm install` of the chart with a CRD in place skips it (Helm's
// crds/: installed only when absent, never upgraded, never deleted): the
// CRD is unchanged and not the release's, and stays after helm uninstall.
// The size limit is nri-cni's kubernetes.maxNADConfigBytes: with
// deploy/base's NAD admission policy bound to deny, a config over it is
// refused naming that key, a 1 MiB one too (by the size rule, within the
// API server's CEL budget).
func TestNADCRDOverMultus(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Opts{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
	t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))

	apply := func(file string) string {
		t.Helper()
		out, err := c.Kubectl(ctx, "apply", "-f", file)
		require.NoError(t, err)
		_, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m", "crd/"+nadCRDName)
		require.NoError(t, err)
		return strings.TrimSpace(out)
	}
	stored := func() crdState {
		t.Helper()
		out, err := c.Kubectl(ctx, "get", "crd", nadCRDName, "-o", "json")
		require.NoError(t, err)
		var s crdState
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		return s
	}

	t.Logf("Multus's CRD: %s", apply(filepath.Join(deploy.RepoRoot(), deploy.MultusCRDFile)))
	multus := stored()
	ns := harness.RandomName("nad-crd-")
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	nads, err := nadclient.NewForConfig(c.RESTConfig)
	require.NoError(t, err)
	create := func(name, config string) error {
		obj := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
		_, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	require.NoError(t, create("from-multus", `{"cniVersion":"1.0.0","name":"m","type":"bridge","bridge":"nad-m"}`))

	t.Logf("deploy/base's CRD over it: %s", apply(filepath.Join(deploy.RepoRoot(), "deploy", "base", "crd-networkattachmentdefinitions.yaml")))
	ours := stored()
	assert.JSONEq(t, string(multus.Spec), string(ours.Spec), "the spec the API server keeps is Multus's")
	assert.Equal(t, multus.Status.AcceptedNames, ours.Status.AcceptedNames)
	assert.Equal(t, []string{"nad", "net-attach-def"}, ours.Status.AcceptedNames.ShortNames)
	for _, name := range []string{"net-attach-def", "nad", "network-attachment-definitions"} {
		out, err := c.Kubectl(ctx, "get", name, "-n", ns, "-o", "name")
		require.NoError(t, err, "kubectl get %s", name)
		assert.Equal(t, "networkattachmentdefinition.k8s.cni.cncf.io/from-multus", strings.TrimSpace(out), "kubectl get %s", name)
	}

	// Larger than the old CRD's maxLength (16384 characters): the CRD admits
	// it; only nri-cni's limit (the node, the admission policy) bounds it.
	large := padded(20_000)
	require.NoError(t, create("large", large), "no maxLength on spec.config")
	got, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Get(ctx, "large", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, large, got.Spec.Config)

	// Helm's crds/: the existing CRD is left alone, before and after.
	h := newHelm(t)
	out, err := h.run(ctx, "install", "crd-check", ChartDir(), "--kubeconfig", c.Kubeconfig, "--namespace", ns,
		"--set", "daemonSet.enabled=false,rbac.create=false,policy.enabled=false,kubernetes.enabled=false,failClosed.admissionPolicy=false")
	require.NoError(t, err)
	t.Logf("helm install with the CRD in place:\n%s", out)
	afterHelm := stored()
	assert.JSONEq(t, string(multus.Spec), string(afterHelm.Spec), "helm install left the CRD as it was")
	assert.NotContains(t, afterHelm.Metadata.Annotations, "meta.helm.sh/release-name", "not adopted by the release")
	_, err = h.run(ctx, "uninstall", "crd-check", "--kubeconfig", c.Kubeconfig, "--namespace", ns, "--wait")
	require.NoError(t, err)
	assert.JSONEq(t, string(multus.Spec), string(stored().Spec), "helm uninstall left the CRD")
	list, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, list.Items, 2, "the NADs are still there")

	// nri-cni's own limit at admission: deploy/base's NAD policy, bound to deny.
	shipped := filepath.Join(deploy.RepoRoot(), "deploy", "base", "nad-policy.yaml")
	out, err = c.Kubectl(ctx, "apply", "-f", shipped)
	require.NoError(t, err, out)
	out, err = c.Kubectl(ctx, "patch", "validatingadmissionpolicybinding", nadpolicy.AdmissionPolicyName, "--type=merge",
		"-p", `{"spec":{"validationActions":["Deny"]}}`)
	require.NoError(t, err, out)
	waitTypeChecked(ctx, t, c, nadpolicy.AdmissionPolicyName)
	dryRun := func(config string) error {
		obj := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: harness.RandomName("nad-"), Namespace: ns},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
		_, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	require.Eventually(t, func() bool { return dryRun(large) != nil }, waitFor, 200*time.Millisecond, "the policy never refused")
	require.NoError(t, dryRun(padded(config.DefaultMaxNADConfigBytes)), "a config of exactly maxNADConfigBytes is admitted")
	for _, n := range []int{config.DefaultMaxNADConfigBytes + 1, 20_000, 1 << 20} {
		start := time.Now()
		err := dryRun(padded(n))
		require.Error(t, err, "%d bytes", n)
		assert.Contains(t, err.Error(), "more than 16384 (kubernetes.maxNADConfigBytes)", "%d bytes", n)
		t.Logf("%d bytes: refused in %s: %v", n, time.Since(start).Round(time.Millisecond), err)
	}
}

// crdState is what the test compares of a stored CRD.
type crdState struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec   json.RawMessage `json:"spec"`
	Status struct {
		AcceptedNames struct {
			Plural     string   `json:"plural"`
			Singular   string   `json:"singular"`
			Kind       string   `json:"kind"`
			ListKind   string   `json:"listKind"`
			ShortNames []string `json:"shortNames"`
		} `json:"acceptedNames"`
	} `json:"status"`
}

// padded is a config the shipped NAD policy allows but for its size, of
// exactly n bytes (n >= 100).
func padded(n int) string {
	head, tail := `{"cniVersion":"1.0.0","name":"large","type":"bridge","bridge":"nad-large","pad":"`, `"}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}
