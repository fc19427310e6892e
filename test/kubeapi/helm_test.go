package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
)

// helmCmd runs the pinned helm with private cache/config/data dirs.
type helmCmd struct {
	bin, home string
}

func newHelm(t *testing.T) helmCmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := EnsureHelm(ctx)
	require.NoError(t, err)
	return helmCmd{bin: bin, home: t.TempDir()}
}

func (h helmCmd) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"), "HELM_DATA_HOME="+filepath.Join(h.home, "data"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// mapV1 is the capability a cluster serving MutatingAdmissionPolicy v1
// (Kubernetes >= 1.36) shows the chart.
const mapV1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// template renders the chart (CRDs included) as for a cluster serving
// MutatingAdmissionPolicy v1, and decodes it strictly.
func (h helmCmd) template(ctx context.Context, t *testing.T, ns string, args ...string) *deploy.Objects {
	t.Helper()
	return h.templateWith(ctx, t, ns, append([]string{"--api-versions", mapV1}, args...)...)
}

// templateWith renders the chart with only args' capabilities (helm's
// defaults, --api-versions, or a cluster's with --kubeconfig and --validate)
// and decodes it strictly.
func (h helmCmd) templateWith(ctx context.Context, t *testing.T, ns string, args ...string) *deploy.Objects {
	t.Helper()
	out, err := h.run(ctx, append([]string{"template", "nri-cni", ChartDir(), "--namespace", ns, "--include-crds"}, args...)...)
	require.NoError(t, err)
	var o deploy.Objects
	require.NoError(t, o.Decode("helm template", []byte(out)))
	return &o
}

// requiredPolicySlots are the required-plugins policy's and binding's slots.
var requiredPolicySlots = []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}

// checkHelmOnServer: helm template with the capabilities of the cluster's
// API server (v, before any of the chart's objects exist there) renders the
// required-plugins policy in the version the server serves (v1 from 1.36,
// v1beta1 before, which test/cluster serves there), as deploy/base's; with
// failClosed.admissionPolicy=false, none.
func checkHelmOnServer(ctx context.Context, t *testing.T, c *cluster.Cluster, v *version.Version) {
	h := newHelm(t)
	want := "admissionregistration.k8s.io/v1"
	if v.Minor() < 36 {
		want = "admissionregistration.k8s.io/v1beta1"
	}
	on := h.templateWith(ctx, t, "kube-system", "--kubeconfig", c.Kubeconfig, "--validate")
	require.Empty(t, on.Missing(), "every kind rendered")
	assert.Equal(t, want, on.RequiredPolicy.APIVersion)
	assert.Equal(t, want, on.RequiredPolicyBinding.APIVersion)
	base, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	assert.Equal(t, base.RequiredPolicy.Name, on.RequiredPolicy.Name)
	assert.Equal(t, base.RequiredPolicy.Spec, on.RequiredPolicy.Spec, "deploy/base's policy")
	assert.Equal(t, base.RequiredPolicyBinding.Spec, on.RequiredPolicyBinding.Spec)
	t.Logf("helm template on %s: %s %s", v, on.RequiredPolicy.APIVersion, on.RequiredPolicy.Kind)

	off := h.templateWith(ctx, t, "kube-system", "--kubeconfig", c.Kubeconfig, "--validate", "--set", "failClosed.admissionPolicy=false")
	assert.ElementsMatch(t, requiredPolicySlots, off.Missing(), "failClosed.admissionPolicy=false: no policy")
}

func TestHelmLint(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	for _, args := range [][]string{
		nil,
		{"--set", "kubernetes.enabled=false,kubernetes.npwgAnnotation=false", "--set", "daemonSet.enabled=false"},
	} {
		out, err := h.run(ctx, append([]string{"lint", "--strict", ChartDir()}, args...)...)
		require.NoError(t, err, "helm lint %v", args)
		t.Logf("helm lint %v:\n%s", args, out)
	}
}

// TestHelmTemplateMatchesBase: with its defaults, in kube-system, the chart
// renders what deploy/base ships (labels and the config's comments aside).
func TestHelmTemplateMatchesBase(t *testing.T) {
	h := newHelm(t)
	base, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	o := h.template(context.Background(), t, "kube-system")
	require.Empty(t, o.Missing(), "every kind rendered")

	assert.Equal(t, base.ClusterRole.Rules, o.ClusterRole.Rules, "same RBAC rules")
	assert.Equal(t, base.ClusterRoleBinding.RoleRef, o.ClusterRoleBinding.RoleRef)
	assert.Equal(t, base.ClusterRoleBinding.Subjects, o.ClusterRoleBinding.Subjects)
	assert.Equal(t, base.ServiceAccount.Name, o.ServiceAccount.Name)
	assert.Equal(t, base.ServiceAccount.Namespace, o.ServiceAccount.Namespace)
	assert.Equal(t, base.Policy.Name, o.Policy.Name)
	assert.Equal(t, base.Policy.Spec, o.Policy.Spec, "same policy")
	assert.Equal(t, base.PolicyBinding.Spec, o.PolicyBinding.Spec)
	assert.Equal(t, base.NADPolicy.Name, o.NADPolicy.Name)
	assert.Equal(t, base.NADPolicy.Annotations, o.NADPolicy.Annotations, "NAD admission policy made from the same kubernetes.nadPolicy")
	assert.Equal(t, base.NADPolicy.Spec, o.NADPolicy.Spec, "same NAD admission policy")
	assert.Equal(t, base.NADPolicyBinding.Spec, o.NADPolicyBinding.Spec)
	assert.Equal(t, base.DeviceClass.Name, o.DeviceClass.Name, "the DRA driver's DeviceClass")
	assert.Equal(t, base.DeviceClass.Spec, o.DeviceClass.Spec)
	assert.Equal(t, base.SlicePolicy.Name, o.SlicePolicy.Name)
	assert.Equal(t, base.SlicePolicy.Spec, o.SlicePolicy.Spec, "same ResourceSlice policy")
	assert.Equal(t, base.SlicePolicyBinding.Name, o.SlicePolicyBinding.Name)
	assert.Equal(t, base.SlicePolicyBinding.Spec, o.SlicePolicyBinding.Spec)
	assert.Equal(t, base.ClaimPolicy.Name, o.ClaimPolicy.Name)
	assert.Equal(t, base.ClaimPolicy.Spec, o.ClaimPolicy.Spec, "same claim status policy")
	assert.Equal(t, base.ClaimPolicyBinding.Name, o.ClaimPolicyBinding.Name)
	assert.Equal(t, base.ClaimPolicyBinding.Spec, o.ClaimPolicyBinding.Spec)
	assert.Equal(t, base.RequiredPolicy.APIVersion, o.RequiredPolicy.APIVersion)
	assert.Equal(t, base.RequiredPolicy.Name, o.RequiredPolicy.Name)
	assert.Equal(t, base.RequiredPolicy.Spec, o.RequiredPolicy.Spec, "same required-plugins policy")
	assert.Equal(t, base.RequiredPolicyBinding.Name, o.RequiredPolicyBinding.Name)
	assert.Equal(t, base.RequiredPolicyBinding.Spec, o.RequiredPolicyBinding.Spec, "same namespaces")
	baseNAD, err := os.ReadFile(filepath.Join(base.Dir, "nad-policy.yaml"))
	require.NoError(t, err)
	chartNAD, err := os.ReadFile(filepath.Join(ChartDir(), "files", "nad-policy.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(baseNAD), string(chartNAD), "files/nad-policy.yaml is a copy of deploy/base's")
	assert.Equal(t, base.CRD.Spec, o.CRD.Spec, "same CRD")
	baseCRD, err := os.ReadFile(filepath.Join(base.Dir, "crd-networkattachmentdefinitions.yaml"))
	require.NoError(t, err)
	chartCRD, err := os.ReadFile(filepath.Join(ChartDir(), "crds", "networkattachmentdefinitions.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(baseCRD), string(chartCRD), "crds/ is a copy of deploy/base's CRD")

	assert.Equal(t, parseConf(t, base.ConfigMap.Data[deploy.ConfigKey]), parseConf(t, o.ConfigMap.Data[deploy.ConfigKey]),
		"same nri.conf")
	assert.Equal(t, base.NetworkKeys(), networkKeys(o), "same network files")
	for _, k := range base.NetworkKeys() {
		assert.JSONEq(t, base.ConfigMap.Data[k], o.ConfigMap.Data[k], k)
	}

	assert.Equal(t, base.DaemonSet.Name, o.DaemonSet.Name)
	assert.Equal(t, base.DaemonSet.Namespace, o.DaemonSet.Namespace)
	assert.Equal(t, base.DaemonSet.Spec.UpdateStrategy, o.DaemonSet.Spec.UpdateStrategy)
	assert.Equal(t, base.DaemonSet.Spec.Template.Spec, o.DaemonSet.Spec.Template.Spec,
		"same pod: args, env, mounts, volumes, probes, resources, tolerations")
}

func parseConf(t *testing.T, data string) config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(data))
	require.NoError(t, err)
	return cfg
}

func networkKeys(o *deploy.Objects) []string {
	b := deploy.Base{Objects: *o}
	return b.NetworkKeys()
}

// TestHelmTemplateValues: what the main values change.
func TestHelmTemplateValues(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(valuesFile, []byte(`
networks:
  10-secondary: null
  macvlan:
    cniVersion: "1.0.0"
    name: lan
    type: macvlan
    master: eth1
    ipam: {type: host-local, ranges: [[{subnet: 192.168.7.0/24}]]}
config:
  podCapabilities: []
  requireAnnotation: false
  namespaces: {include: [team-a], exclude: []}
kubernetes:
  enabled: true
  sharedNamespaces: [shared]
  npwgAnnotation: true
image: {repository: registry.example/nri-cni, tag: v9.9.9, pullPolicy: Always}
nodeSelector: {nri-cni: "on"}
tolerations: []
`), 0o644))
	o := h.template(ctx, t, "net-system", "-f", valuesFile)

	cfg := parseConf(t, o.ConfigMap.Data[deploy.ConfigKey])
	require.NotNil(t, cfg.Kubernetes, "Kubernetes mode on")
	assert.Equal(t, []string{"shared"}, cfg.Kubernetes.SharedNamespaces)
	assert.True(t, cfg.Kubernetes.NPWG())
	assert.Empty(t, cfg.Kubernetes.Kubeconfig, "in-cluster")
	assert.Empty(t, cfg.Kubernetes.NodeName, "NODE_NAME")
	assert.Empty(t, cfg.PodCapabilities)
	assert.False(t, cfg.RequireAnnotation)
	assert.Equal(t, []string{"team-a"}, cfg.Namespaces.Include)
	assert.Equal(t, "/etc/nri-cni/net.d", cfg.ConfDir, "paths follow the mounts")

	assert.Equal(t, []string{"macvlan.conf"}, networkKeys(o), "an object without plugins is a .conf")
	var lan map[string]any
	require.NoError(t, json.Unmarshal([]byte(o.ConfigMap.Data["macvlan.conf"]), &lan))
	assert.Equal(t, "lan", lan["name"])
	vols := o.DaemonSet.Spec.Template.Spec.Volumes
	require.NotEmpty(t, vols)
	found := false
	for _, v := range vols {
		if v.Name == "networks" {
			found = true
			require.NotNil(t, v.ConfigMap)
			assert.Equal(t, o.ConfigMap.Name, v.ConfigMap.Name)
			assert.Empty(t, v.ConfigMap.Items, "every key: a network added to the ConfigMap appears in confDir")
		}
	}
	assert.True(t, found, "networks volume")

	spec := o.DaemonSet.Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		assert.Equal(t, "registry.example/nri-cni:v9.9.9", c.Image, c.Name)
		assert.Equal(t, "Always", string(c.ImagePullPolicy), c.Name)
	}
	assert.Equal(t, map[string]string{"nri-cni": "on"}, spec.NodeSelector)
	assert.Empty(t, spec.Tolerations)
	assert.Equal(t, "net-system", o.DaemonSet.Namespace)
	assert.Equal(t, "request.userInfo.username == 'system:serviceaccount:net-system:nri-cni'",
		o.Policy.Spec.MatchConditions[0].Expression, "the policy follows the release's namespace")
	assert.Equal(t, "net-system", o.ClusterRoleBinding.Subjects[0].Namespace)

	// With DRA on, policy.enabled=false is refused (helm_gates_test.go).
	off := h.template(ctx, t, "kube-system", "--set", "daemonSet.enabled=false,policy.enabled=false,kubernetes.dra.enabled=false")
	assert.ElementsMatch(t, append([]string{"DaemonSet", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass"},
		draPolicySlots...), off.Missing(), "policy.enabled=false: none of the ServiceAccount's policies")
	noKube := h.template(ctx, t, "kube-system", "--set", "kubernetes.enabled=false")
	assert.ElementsMatch(t, append([]string{"ValidatingAdmissionPolicy/" + deploy.NADPolicySuffix,
		"ValidatingAdmissionPolicyBinding/" + deploy.NADPolicySuffix, "DeviceClass"}, draPolicySlots...),
		noKube.Missing(), "no NAD admission policy and no DRA without Kubernetes mode")
	assertNoDRA(t, noKube)

	inc := o.RequiredPolicyBinding.Spec.MatchResources
	require.NotNil(t, inc, "the binding follows config.namespaces")
	assert.Equal(t, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a"}}}},
		inc.NamespaceSelector, "only the included namespace's pods are made to require nri-cni")
	all := h.template(ctx, t, "kube-system", "--set", "config.namespaces=null")
	assert.Nil(t, all.RequiredPolicyBinding.Spec.MatchResources, "no namespace left out: every namespace")
	renamed := h.template(ctx, t, "kube-system", "--set", "nameOverride=netattach")
	own := ""
	for _, mc := range renamed.RequiredPolicy.Spec.MatchConditions {
		if mc.Name == "not-nri-cni" {
			own = mc.Expression
		}
	}
	assert.Contains(t, own, "!= 'netattach'", "nri-cni's own pod, by the chart's name label")
	assert.Equal(t, "netattach", renamed.DaemonSet.Spec.Template.Labels["app.kubernetes.io/name"])
	noMAP := h.template(ctx, t, "kube-system", "--set", "failClosed.admissionPolicy=false")
	assert.ElementsMatch(t, requiredPolicySlots, noMAP.Missing(), "failClosed.admissionPolicy=false: no required-plugins policy")
	noAPI := h.templateWith(ctx, t, "kube-system")
	assert.ElementsMatch(t, requiredPolicySlots, noAPI.Missing(), "a cluster serving no MutatingAdmissionPolicy: none")
	beta := h.templateWith(ctx, t, "kube-system", "--api-versions", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy")
	assert.Equal(t, "admissionregistration.k8s.io/v1beta1", beta.RequiredPolicy.APIVersion, "1.34, 1.35 with the API on")
	assert.Equal(t, "admissionregistration.k8s.io/v1beta1", beta.RequiredPolicyBinding.APIVersion)

	_, err := h.run(ctx, "template", "nri-cni", ChartDir(), "--set", "networks.bad=not json")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "networks.bad: not a CNI config")
}
