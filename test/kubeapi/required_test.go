package kubeapi

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	validator "github.com/containerd/nri/plugins/default-validator"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// The keys NRI's default validator reads (containerd/nri pkg/plugin).
const (
	requiredPodKey  = "required-plugins.noderesource.dev/pod"
	requiredBareKey = "required-plugins.noderesource.dev"
	nriCNIPlugin    = "nri-cni"
)

// requiredCase is one pod CREATE: its namespace ("" = the test's), labels,
// annotations and hostNetwork, and what the policy must leave: want is the
// .../pod value ("" = the pod left exactly as it was); guarded, whether
// NRI's validator then refuses its containers without nri-cni; others, the
// plugins the pod required before, which it must still require.
type requiredCase struct {
	name        string
	ns          string
	labels      map[string]string
	annotations map[string]string
	hostNetwork bool
	want        string
	guarded     bool
	others      []string
}

func requiredCases() []requiredCase {
	const npwg, own = plan.AnnotationNPWGNetworks, plan.AnnotationNetworks
	nets := func(kv ...string) map[string]string {
		m := map[string]string{own: "secondary"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	longList := "[" + strings.Repeat("other, ", 30000) + "other]" // ~210 KiB
	first := `["nri-cni"]`
	return []requiredCase{
		{name: "npwg string form", annotations: map[string]string{npwg: "net-a, other/net-b@eth5"}, want: first, guarded: true},
		{name: "npwg JSON form", annotations: map[string]string{npwg: `[{"name":"net-a","interface":"data0"}]`}, want: first, guarded: true},
		{name: "nri-cni.io/networks", annotations: map[string]string{own: "secondary"}, want: first, guarded: true},
		{name: "both annotations", annotations: map[string]string{own: "secondary", npwg: "net-a"}, want: first, guarded: true},
		{name: "blank networks", annotations: map[string]string{own: " \t\n", npwg: ""}},
		{name: "no annotations"},
		{name: "unrelated annotations", annotations: map[string]string{"keep": "1", "example.com/x": "y"}},
		{name: "unrelated annotations kept", annotations: nets("keep", "1", "example.com/x", "y"), want: first, guarded: true},
		{name: "hostNetwork", annotations: nets(), hostNetwork: true},
		{name: "nri-cni's own pod", annotations: nets(), labels: map[string]string{"app.kubernetes.io/name": "nri-cni"}},
		{name: "other app label", annotations: nets(), labels: map[string]string{"app.kubernetes.io/name": "web"}, want: first, guarded: true},
		{name: "excluded namespace kube-system", ns: "kube-system", annotations: nets()},
		{name: "pod key JSON", annotations: nets(requiredPodKey, `["other"]`), want: `["other", "nri-cni"]`, guarded: true, others: []string{"other"}},
		{name: "pod key JSON with spaces", annotations: nets(requiredPodKey, ` [ "other" , "third" ] `),
			want: `[ "other" , "third", "nri-cni"]`, guarded: true, others: []string{"other", "third"}},
		{name: "pod key multi-line JSON", annotations: nets(requiredPodKey, "[\n  \"other\",\n  \"third\"\n]\n"),
			want: "[\n  \"other\",\n  \"third\", \"nri-cni\"]", guarded: true, others: []string{"other", "third"}},
		{name: "pod key flow list", annotations: nets(requiredPodKey, "[other, 'third']"), want: `[other, 'third', "nri-cni"]`,
			guarded: true, others: []string{"other", "third"}},
		{name: "pod key []", annotations: nets(requiredPodKey, "[ ]"), want: first, guarded: true},
		{name: "pod key blank", annotations: nets(requiredPodKey, ""), want: first, guarded: true},
		{name: "pod key null", annotations: nets(requiredPodKey, "null"), want: first, guarded: true},
		{name: "pod key naming nri-cni", annotations: nets(requiredPodKey, `["other","nri-cni"]`), guarded: true, others: []string{"other"}},
		{name: "pod key naming nri-cni plainly", annotations: nets(requiredPodKey, "[nri-cni]"), guarded: true},
		{name: "pod key naming nri-cni2", annotations: nets(requiredPodKey, `["nri-cni2"]`), want: `["nri-cni2", "nri-cni"]`,
			guarded: true, others: []string{"nri-cni2"}},
		{name: "pod key block list", annotations: nets(requiredPodKey, "- other\n- third\n"), others: []string{"other", "third"}},
		{name: "pod key with an escape", annotations: nets(requiredPodKey, `["oth\"er"]`), others: []string{`oth"er`}},
		{name: "pod key long", annotations: nets(requiredPodKey, longList), others: []string{"other"}},
		{name: "bare key", annotations: nets(requiredBareKey, `["other"]`), want: `["other", "nri-cni"]`, guarded: true, others: []string{"other"}},
		{name: "bare key naming nri-cni", annotations: nets(requiredBareKey, `["nri-cni"]`), guarded: true},
		{name: "bare key block list", annotations: nets(requiredBareKey, "- other\n"), others: []string{"other"}},
		{name: "pod key wins over bare key", annotations: nets(requiredPodKey, `["other"]`, requiredBareKey, `["third"]`),
			want: `["other", "nri-cni"]`, guarded: true, others: []string{"other"}},
		// The validator reads the container's own key for that container
		// (app) and the pod's for the others: the container key is left.
		{name: "container key left", annotations: nets(requiredBareKey+"/container.app", `["other"]`),
			want: first, others: []string{"other"}},
		{name: "long networks annotation", annotations: map[string]string{npwg: strings.Repeat("net-a,", 35000) + "net-a"},
			want: first, guarded: true},
	}
}

// TestRequiredPluginsPolicy: deploy/base's required-plugins
// MutatingAdmissionPolicy (deploy/base-1.34's before Kubernetes 1.36),
// applied as shipped to a real API server: the annotation it leaves on pod
// CREATEs (dry-run and real), checked with NRI's own default validator; an
// UPDATE adding networks (hot-plug) mutated, nri-cni's own not; a mutating webhook that adds the networks annotation after
// it (reinvocation); and how long after `kubectl apply` it takes effect.
func TestRequiredPluginsPolicy(t *testing.T) {
	testenv.RequireRoot(t)
	// The validator logs every refusal (through logrus): checkRequired
	// provokes them on purpose. This package runs no other NRI code.
	nrilog.Set(quietLog{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Opts{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
	sv, err := c.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	t.Logf("cluster up in %s, API server %s", time.Since(start).Round(time.Millisecond), sv.GitVersion)
	v, err := version.ParseSemantic(sv.GitVersion)
	require.NoError(t, err)

	// Before anything of the chart's exists on the server: helm template
	// with the server's capabilities.
	t.Run("HelmOnServer", func(t *testing.T) { checkHelmOnServer(ctx, t, c, v) })

	file, apiVersion := requiredPolicyFile(ctx, t, c, v)
	var shipped deploy.Objects
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, shipped.Decode(file, data))
	require.Equal(t, apiVersion, shipped.RequiredPolicy.APIVersion)
	ns := harness.RandomName("required-")
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}))
	})

	// Every case as the API server admits it without the policy: the pods
	// the policy leaves alone must come out the same with it.
	cases := requiredCases()
	before := make([]*corev1.Pod, len(cases))
	for i, tc := range cases {
		before[i], err = admit(ctx, c, tc.pod(ns, i), true)
		require.NoError(t, err, tc.name)
	}

	mutated := func() bool {
		p, err := admit(ctx, c, requiredPod(ns, "probe", map[string]string{plan.AnnotationNetworks: "secondary"}), true)
		return err == nil && p.Annotations[requiredPodKey] != ""
	}
	require.False(t, mutated(), "no pod mutated before the policy is applied")
	// A pod that asks, created before the policy (UpdateMutated).
	legacy, err := admit(ctx, c, requiredPod(ns, "legacy", map[string]string{plan.AnnotationNetworks: "secondary"}), false)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods(ns).Delete(context.Background(), legacy.Name, metav1.DeleteOptions{})
	})
	var pickups []time.Duration
	for round := range 5 {
		if round > 0 {
			_, err := c.Kubectl(ctx, "delete", "-f", file)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return !mutated() }, waitFor, 20*time.Millisecond, "policy deleted, still mutating")
		}
		applyStart := time.Now()
		out, err := c.Kubectl(ctx, "apply", "-f", file)
		require.NoError(t, err)
		applied := time.Now()
		require.Eventually(t, mutated, waitFor, 5*time.Millisecond, "the policy never mutated a pod")
		pickups = append(pickups, time.Since(applied))
		t.Logf("round %d: kubectl apply took %s (%s); first dry-run pod mutated %s after it returned (%s after it started)",
			round+1, applied.Sub(applyStart).Round(time.Millisecond), strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "),
			pickups[round].Round(time.Millisecond), time.Since(applyStart).Round(time.Millisecond))
	}
	t.Cleanup(func() {
		_, err := c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file)
		assert.NoError(t, err)
	})
	sort.Slice(pickups, func(i, j int) bool { return pickups[i] < pickups[j] })
	t.Logf("policy in effect after kubectl apply returned: min %s, max %s (%d rounds)",
		pickups[0].Round(time.Millisecond), pickups[len(pickups)-1].Round(time.Millisecond), len(pickups))

	for _, dryRun := range []bool{true, false} {
		t.Run(map[bool]string{true: "DryRun", false: "Create"}[dryRun], func(t *testing.T) {
			for i, tc := range cases {
				t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
					pod := tc.pod(ns, i)
					got, err := admit(ctx, c, pod, dryRun)
					require.NoError(t, err)
					if !dryRun {
						t.Cleanup(func() {
							_ = c.Client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
						})
					}
					checkRequired(t, tc, got.Annotations)
					// Nothing else changed: the spec, the labels, the
					// managed fields (who set what).
					want := stable(before[i])
					if tc.want != "" {
						want.Annotations[requiredPodKey] = tc.want
					}
					assert.Equal(t, want, stable(got), "only the annotation")
				})
			}
		})
	}
	t.Run("KubectlJSONPath", func(t *testing.T) {
		// The check docs/kubernetes.md gives.
		p, err := admit(ctx, c, requiredPod(ns, "checked", map[string]string{plan.AnnotationNetworks: "secondary"}), false)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Client.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
		out, err := c.Kubectl(ctx, "-n", ns, "get", "pod", p.Name, "-o",
			`jsonpath={.metadata.annotations.required-plugins\.noderesource\.dev/pod}`)
		require.NoError(t, err)
		assert.Equal(t, `["nri-cni"]`, out)
		// Whether the policy is in effect, without creating a pod.
		out, err = c.Kubectl(ctx, "-n", ns, "run", "probe", "--image=x", "--restart=Never", "--dry-run=server",
			"--annotations=nri-cni.io/networks=secondary", "-o", `jsonpath={.metadata.annotations.required-plugins\.noderesource\.dev/pod}`)
		require.NoError(t, err)
		assert.Equal(t, `["nri-cni"]`, out)
	})
	t.Run("UpdateMutated", func(t *testing.T) { checkUpdateMutated(ctx, t, c, ns, legacy) })
	t.Run("Reinvocation", func(t *testing.T) { checkReinvocation(ctx, t, c, ns) })
}

// pod is tc's pod, the i-th, in namespace ns unless tc names one.
func (tc requiredCase) pod(ns string, i int) *corev1.Pod {
	if tc.ns != "" {
		ns = tc.ns
	}
	p := requiredPod(ns, fmt.Sprintf("pod-%d", i), tc.annotations)
	p.Labels = tc.labels
	p.Spec.HostNetwork = tc.hostNetwork
	return p
}

// stable is p without what differs between two creations of it (uid,
// times, resource version), its annotations a map even when empty.
func stable(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.UID, p.ResourceVersion, p.CreationTimestamp = "", "", metav1.Time{}
	for i := range p.ManagedFields {
		p.ManagedFields[i].Time = nil
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Status = corev1.PodStatus{}
	return p
}

// quietLog is an NRI logger that drops everything.
type quietLog struct{}

func (quietLog) Debugf(context.Context, string, ...any) {}
func (quietLog) Infof(context.Context, string, ...any)  {}
func (quietLog) Warnf(context.Context, string, ...any)  {}
func (quietLog) Errorf(context.Context, string, ...any) {}

// checkRequired: the pod's annotations are what tc wants, and NRI's
// default validator reads them so.
func checkRequired(t *testing.T, tc requiredCase, got map[string]string) {
	t.Helper()
	want := map[string]string{}
	for k, v := range tc.annotations {
		want[k] = v
	}
	if tc.want != "" {
		want[requiredPodKey] = tc.want
	}
	if len(want) == 0 {
		assert.Empty(t, got, "no annotation added")
	} else {
		assert.Equal(t, want, got, "only %s added or changed", requiredPodKey)
	}
	// The validator as containerd and CRI-O run it, for a container "app".
	check := func(plugins ...string) error {
		req := &api.ValidateContainerAdjustmentRequest{
			Pod: &api.PodSandbox{Name: "pod", Namespace: "ns", Annotations: got}, Container: &api.Container{Name: "app"}}
		for i, p := range plugins {
			req.AddPlugin(p, fmt.Sprint(10+i))
		}
		return validator.NewDefaultValidator(&validator.DefaultValidatorConfig{Enable: true}).ValidateContainerAdjustment(context.Background(), req)
	}
	away := check(tc.others...)
	if tc.guarded {
		require.Error(t, away, "refused while nri-cni is away")
		assert.Contains(t, away.Error(), `required plugin "nri-cni" not present`)
	} else {
		assert.NoError(t, away, "not made to wait for nri-cni")
	}
	if tc.guarded {
		assert.NoError(t, check(append([]string{nriCNIPlugin}, tc.others...)...), "starts with nri-cni and the plugins it required")
	}
	for _, other := range tc.others {
		var rest []string
		for _, p := range append([]string{nriCNIPlugin}, tc.others...) {
			if p != other {
				rest = append(rest, p)
			}
		}
		err := check(rest...)
		require.Error(t, err, "still requires %s", other)
		assert.Contains(t, err.Error(), strings.Trim(fmt.Sprintf("%q", other), `"`))
	}
}

// serverMinor is the minor version of c's API server.
func serverMinor(t *testing.T, c *cluster.Cluster) uint {
	t.Helper()
	sv, err := c.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	v, err := version.ParseSemantic(sv.GitVersion)
	require.NoError(t, err)
	return v.Minor()
}

// requiredPolicyFile is the shipped policy as the API server of version v
// takes it, and its apiVersion: deploy/base's file as it is (>= 1.36), else
// the policy and binding of `kubectl kustomize deploy/base-1.34`.
func requiredPolicyFile(ctx context.Context, t *testing.T, c *cluster.Cluster, v *version.Version) (string, string) {
	base := filepath.Join(deploy.RepoRoot(), "deploy", "base")
	if v.Minor() >= 36 {
		return filepath.Join(base, "required-plugins-policy.yaml"), "admissionregistration.k8s.io/v1"
	}
	// What docs/kubernetes.md says deploy/base does there.
	out, err := c.Kubectl(ctx, "apply", "-k", base, "--dry-run=server")
	require.Error(t, err, "deploy/base on %s", v)
	t.Logf("kubectl apply -k deploy/base --dry-run=server on %s: %v", v, err)
	assert.Contains(t, out, `no matches for kind "MutatingAdmissionPolicy" in version "admissionregistration.k8s.io/v1"`)
	out, err = c.Kubectl(ctx, "kustomize", filepath.Join(deploy.RepoRoot(), "deploy", "base-1.34"))
	require.NoError(t, err)
	var docs []string
	for _, doc := range strings.Split(out, "\n---\n") {
		if strings.Contains(doc, "\nkind: MutatingAdmissionPolicy") {
			docs = append(docs, doc)
		}
	}
	require.Len(t, docs, 2, "deploy/base-1.34: the policy and its binding")
	file := filepath.Join(t.TempDir(), "required-plugins-policy.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(docs, "\n---\n")), 0o644))
	return file, "admissionregistration.k8s.io/v1beta1"
}

// requiredPod is a pod no scheduler places (pendingPod's scheduler) with
// the given annotations, and no token volume (whose name is random).
func requiredPod(ns, name string, annotations map[string]string) *corev1.Pod {
	p := pendingPod(ns, name, "")
	p.Annotations = annotations
	automount := false
	p.Spec.AutomountServiceAccountToken = &automount
	return p
}

// admit creates pod as the admin (with dryRun, only through admission: the
// API server answers with the object it would store).
func admit(ctx context.Context, c *cluster.Cluster, pod *corev1.Pod, dryRun bool) (*corev1.Pod, error) {
	var opts metav1.CreateOptions
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, opts)
}

// checkUpdateMutated (issue 41, item 5): a pod that gets networks later,
// by hot-plug (its networks annotation added by an update), gets the
// requirement in the same update, so that its next sandbox (the pause
// container died, the node rebooted: the kubelet takes the sandbox's
// annotations from the pod as it is then) waits for nri-cni too. nri-cni's
// own update (its network-status patch, which its ValidatingAdmissionPolicy
// lets change nothing else) is never mutated: legacy, a pod that asks and
// was created before the policy, keeps its annotations through it, and gets
// the requirement at the next update of anyone else.
func checkUpdateMutated(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, legacy *corev1.Pod) {
	p, err := admit(ctx, c, requiredPod(ns, "updated", map[string]string{"keep": "1"}), false)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Client.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
	assert.Equal(t, map[string]string{"keep": "1"}, p.Annotations)
	p.Annotations[plan.AnnotationNetworks] = "secondary"
	got, err := c.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"keep": "1", plan.AnnotationNetworks: "secondary", requiredPodKey: `["nri-cni"]`},
		got.Annotations, "the networks added by an UPDATE are waited for")
	checkRequired(t, requiredCase{annotations: map[string]string{"keep": "1", plan.AnnotationNetworks: "secondary"},
		want: `["nri-cni"]`, guarded: true}, got.Annotations)

	// As nri-cni's ServiceAccount (impersonated, with the admin's rights:
	// the policy looks at the user name only).
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:nri-cni", Groups: []string{"system:masters"}}
	as, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	require.NotContains(t, legacy.Annotations, requiredPodKey, "created before the policy")
	status := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{%q:"[]"}}}`, legacy.UID, "k8s.v1.cni.cncf.io/network-status")
	got, err = as.CoreV1().Pods(ns).Patch(ctx, legacy.Name, types.MergePatchType, []byte(status), metav1.PatchOptions{})
	require.NoError(t, err)
	want := map[string]string{"k8s.v1.cni.cncf.io/network-status": "[]"}
	for k, v := range legacy.Annotations {
		want[k] = v
	}
	assert.Equal(t, want, got.Annotations, "nri-cni's network-status patch is not mutated")
	got, err = c.Client.CoreV1().Pods(ns).Patch(ctx, legacy.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"1"}}}`),
		metav1.PatchOptions{})
	require.NoError(t, err)
	assert.Equal(t, `["nri-cni"]`, got.Annotations[requiredPodKey], "anyone else's update of a pod that asks adds it")
}

// checkReinvocation: a mutating webhook (served here, called by the API
// server after the admission policies) adds nri-cni.io/networks to a pod
// created without it; the policy, which skipped the pod at first, is run
// again (reinvocationPolicy IfNeeded) and adds the requirement.
func checkReinvocation(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		patch := `[{"op":"add","path":"/metadata/annotations","value":{"nri-cni.io/networks":"secondary"}}]`
		pt := admissionv1.PatchTypeJSONPatch
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true, Patch: []byte(patch), PatchType: &pt}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	}))
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	name := harness.RandomName("nri-cni-test-")
	label := map[string]string{"nri-cni-test-webhook": name}
	url := srv.URL + "/mutate"
	none, fail, never := admissionregv1.SideEffectClassNone, admissionregv1.Fail, admissionregv1.NeverReinvocationPolicy
	timeout := int32(5)
	whc := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name: "add-networks.nri-cni.test", ClientConfig: admissionregv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: label}, SideEffects: &none, FailurePolicy: &fail,
			ReinvocationPolicy: &never, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"},
		}}}
	_, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, whc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
	var got *corev1.Pod
	require.Eventually(t, func() bool { // the webhook's configuration reaches the API server's informer
		pod := requiredPod(ns, "webhooked", nil)
		pod.Labels = label
		got, err = admit(ctx, c, pod, true)
		return err == nil && got.Annotations[plan.AnnotationNetworks] != ""
	}, waitFor, 100*time.Millisecond, "the webhook never mutated a pod: %v", err)
	t.Logf("webhook calls: %d; pod annotations: %v", calls.Load(), got.Annotations)
	assert.Equal(t, `["nri-cni"]`, got.Annotations[requiredPodKey], "the policy ran again after the webhook")
}
