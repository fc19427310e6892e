package kubeapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/migrate"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

// warnings collects the API server's warnings (HTTP Warning headers) for a
// client whose requests are made one at a time.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

// take returns the warnings since the last take.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.got
	w.got = nil
	return got
}

// nadWriter creates NADs as the cluster's admin and returns what the API
// server answered: its warnings and its error.
type nadWriter struct {
	ctx    context.Context
	client nadclient.Interface
	warn   *warnings
}

func newNADWriter(ctx context.Context, t *testing.T, admin *rest.Config) *nadWriter {
	cfg := rest.CopyConfig(admin)
	w := &nadWriter{ctx: ctx, warn: &warnings{}}
	cfg.WarningHandler = w.warn
	var err error
	w.client, err = nadclient.NewForConfig(cfg)
	require.NoError(t, err)
	return w
}

// create writes NAD ns/name (dry run unless real).
func (w *nadWriter) create(ns, name string, labels map[string]string, config string, real bool) ([]string, error) {
	w.warn.take()
	o := metav1.CreateOptions{}
	if !real {
		o.DryRun = []string{metav1.DryRunAll}
	}
	_, err := w.client.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Create(w.ctx, &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config}}, o)
	return w.warn.take(), err
}

// warned: admitted with one warning.
func warned(warns []string, err error) bool { return err == nil && len(warns) == 1 }

// quiet: admitted without a warning.
func quiet(warns []string, err error) bool { return err == nil && len(warns) == 0 }

// refused: the NAD policy's binding denied the request.
func refused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+nadpolicy.AdmissionPolicyName+"'") &&
		strings.Contains(err.Error(), "denied request")
}

// nadAdmissionConfigs are NADs a Multus cluster has and deploy/base's
// kubernetes.nadPolicy refuses (an uplink, SR-IOV, whereabouts IPAM, the
// pod range), and one it allows.
var nadAdmissionConfigs = map[string]string{
	"uplink": `{"cniVersion":"1.0.0","name":"uplink","type":"macvlan","master":"eth0","ipam":{"type":"host-local","subnet":"10.251.9.0/24"}}`,
	"vf":     `{"cniVersion":"1.0.0","name":"vf","type":"sriov","ipam":{"type":"host-local","subnet":"10.251.8.0/24"}}`,
	"where":  `{"cniVersion":"1.0.0","name":"where","type":"bridge","bridge":"nad-where","ipam":{"type":"whereabouts","range":"10.251.7.0/24"}}`,
	"wide":   `{"cniVersion":"1.0.0","name":"wide","type":"bridge","bridge":"nad-wide","ipam":{"type":"host-local","subnet":"10.244.0.0/16"}}`,
	"ok":     `{"cniVersion":"1.0.0","name":"ok","type":"bridge","bridge":"nad-ok","ipam":{"type":"host-local","ranges":[[{"subnet":"10.251.6.0/24"}]]}}`,
}

// TestNADAdmission: deploy/base's NAD admission policy, in each binding mode
// and scope, against a real API server with its audit log on. Warn (what
// deploy/base and the chart ship) admits the NADs the policy refuses, with
// the refusal as a warning to the client and an audit annotation naming the
// same policy key as the node; deny refuses them; a namespace selector leaves
// other namespaces alone, an object selector other NADs; the chart's values
// render the same bindings; migrate-check lists the NADs there that the
// policy refuses, with the same keys.
func TestNADAdmission(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Opts{Logf: t.Logf, Audit: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
	v, err := c.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	t.Logf("cluster up in %s, API server %s", time.Since(start).Round(time.Millisecond), v.GitVersion)

	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	ensureCRD(ctx, t, c, b)
	cfg, err := config.Parse([]byte(b.ConfigMap.Data[deploy.ConfigKey]))
	require.NoError(t, err)
	node := shippedNADPolicy(t)

	// enforced carries the label the scoped bindings select; other does not.
	enforced, other := harness.RandomName("nada-in-"), harness.RandomName("nada-out-")
	for ns, labels := range map[string]map[string]string{enforced: {"nri-cni.io/nad-admission": "enforce"}, other: nil} {
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}},
			metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	w := newNADWriter(ctx, t, c.RESTConfig)

	apply := func(t *testing.T, what string, manifest []byte) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "nad-policy.yaml")
		require.NoError(t, os.WriteFile(f, manifest, 0o644))
		out, err := c.Kubectl(ctx, "apply", "-f", f)
		require.NoError(t, err, out)
		t.Logf("%s: %s", what, strings.TrimSpace(out))
	}
	t.Cleanup(func() {
		for _, kind := range []string{"validatingadmissionpolicybinding", "validatingadmissionpolicy"} {
			_, _ = c.Kubectl(context.Background(), "delete", "--ignore-not-found", kind, nadpolicy.AdmissionPolicyName)
		}
	})
	generate := func(t *testing.T, opts ...nadpolicy.Option) []byte {
		t.Helper()
		out, err := nadpolicy.AdmissionPolicy(cfg.Kubernetes.NADPolicyOrDefault(), cfg.Kubernetes.NADConfigLimit(), opts...)
		require.NoError(t, err)
		return out
	}
	// nodeKey is the policy key the node refuses a config with.
	nodeKey := func(ns, name string) string {
		err := node.Check(ns, []byte(nadAdmissionConfigs[name]))
		var v *nadpolicy.Violation
		require.True(t, errors.As(err, &v), "%s: the node refuses it: %v", name, err)
		return v.PolicyKey
	}
	refusedNames := []string{"uplink", "vf", "where", "wide"}
	warnedKeys := map[string]string{}
	// kubectlProbe is docs/kubernetes.md's server-side dry run of an uplink
	// NAD in ns: kubectl's output and error.
	kubectlProbe := func(t *testing.T, ns string) (string, error) {
		f := filepath.Join(t.TempDir(), "probe.yaml")
		require.NoError(t, os.WriteFile(f, []byte("apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\n"+
			"metadata: {name: probe, namespace: "+ns+"}\n"+
			`spec: {config: '{"cniVersion":"1.0.0","name":"probe","type":"macvlan","master":"eth0"}'}`+"\n"), 0o644))
		return c.Kubectl(ctx, "apply", "--dry-run=server", "-f", f)
	}

	t.Run("Warn", func(t *testing.T) {
		shipped, err := os.ReadFile(filepath.Join(b.Dir, "nad-policy.yaml"))
		require.NoError(t, err)
		apply(t, "deploy/base/nad-policy.yaml", shipped)
		waitTypeChecked(ctx, t, c, nadpolicy.AdmissionPolicyName)
		active := time.Now()
		require.Eventually(t, func() bool {
			return warned(w.create(other, "probe", nil, nadAdmissionConfigs["uplink"], false))
		}, waitFor, 200*time.Millisecond, "the shipped binding never warned")
		t.Logf("warn binding active after %s", time.Since(active).Round(time.Millisecond))

		for _, name := range refusedNames {
			warns, err := w.create(enforced, name, nil, nadAdmissionConfigs[name], true)
			require.NoError(t, err, "%s: warn mode admits it", name)
			require.Len(t, warns, 1, name)
			t.Logf("%s: warning: %s", name, warns[0])
			prefix := fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': spec.config: ",
				nadpolicy.AdmissionPolicyName, nadpolicy.AdmissionPolicyName)
			assert.True(t, strings.HasPrefix(warns[0], prefix), warns[0])
			key := refusalKey(errors.New(warns[0]))
			assert.Equal(t, nodeKey(enforced, name), key, "%s: the warning names the node's policy key", name)
			warnedKeys[name] = key
		}
		warns, err := w.create(enforced, "ok", nil, nadAdmissionConfigs["ok"], true)
		require.NoError(t, err)
		assert.Empty(t, warns, "an allowed NAD: no warning")
		out, err := kubectlProbe(t, other)
		require.NoError(t, err, "warn: kubectl apply succeeds")
		t.Logf("kubectl apply --dry-run=server (warn):\n%s", out)
		assert.Contains(t, out, "Warning: Validation failed for ValidatingAdmissionPolicy '"+nadpolicy.AdmissionPolicyName+"'")
		assert.Contains(t, out, "(kubernetes.nadPolicy.default.masters, allowed: none)")

		// The audit log has each refusal as an annotation of the create.
		var events []nadAuditEvent
		require.Eventually(t, func() bool {
			events, err = nadCreates(c.AuditLog, enforced)
			require.NoError(t, err)
			return len(events) == len(refusedNames)+1
		}, waitFor, 200*time.Millisecond, "the audit log has the creates")
		annotated := map[string]string{}
		for _, e := range events {
			value, ok := e.Annotations[validationFailureAnnotation]
			if !ok {
				continue
			}
			var failures []struct {
				Message, Policy, Binding string
				ValidationActions        []string
			}
			require.NoError(t, json.Unmarshal([]byte(value), &failures), value)
			require.Len(t, failures, 1, value)
			assert.Equal(t, nadpolicy.AdmissionPolicyName, failures[0].Policy)
			assert.Equal(t, nadpolicy.AdmissionPolicyName, failures[0].Binding)
			assert.Equal(t, []string{"Warn", "Audit"}, failures[0].ValidationActions)
			assert.Equal(t, 201, e.ResponseStatus.Code, "created")
			annotated[e.ObjectRef.Name] = refusalKey(errors.New(failures[0].Message))
		}
		t.Logf("audit annotations %s by NAD: %v", validationFailureAnnotation, annotated)
		for _, name := range refusedNames {
			assert.Equal(t, warnedKeys[name], annotated[name], "%s: the audit annotation names the same key", name)
		}
		assert.NotContains(t, annotated, "ok")

		// The API server counts warnings by policy and binding.
		raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		require.NoError(t, err)
		re := regexp.MustCompile(`(?m)^apiserver_validating_admission_policy_check_total\{enforcement_action="(warn|audit)",error_type="[a-z_]+",policy="` +
			nadpolicy.AdmissionPolicyName + `",policy_binding="` + nadpolicy.AdmissionPolicyName + `"\} (\d+)$`)
		counts := map[string]int{}
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			n, _ := strconv.Atoi(m[2])
			counts[m[1]] += n
			t.Logf("metric: %s", m[0])
		}
		assert.GreaterOrEqual(t, counts["warn"], len(refusedNames))
		assert.GreaterOrEqual(t, counts["audit"], len(refusedNames))
	})

	t.Run("DenyInLabelledNamespaces", func(t *testing.T) {
		apply(t, "--mode deny --namespace-selector nri-cni.io/nad-admission=enforce", generate(t,
			nadpolicy.WithMode(nadpolicy.ModeDeny), nadpolicy.WithNamespaceSelector("nri-cni.io/nad-admission=enforce")))
		require.Eventually(t, func() bool {
			_, err := w.create(enforced, "probe", nil, nadAdmissionConfigs["vf"], false)
			return refused(err)
		}, waitFor, 200*time.Millisecond, "deny never took effect")
		for _, name := range refusedNames {
			_, err := w.create(enforced, name+"-2", nil, nadAdmissionConfigs[name], false)
			require.Error(t, err, name)
			assert.True(t, apierrors.IsForbidden(err), "%s: %v", name, err)
			assert.Equal(t, warnedKeys[name], refusalKey(err), "%s: refused with the key warn mode named: %v", name, err)
			warns, err := w.create(other, name, nil, nadAdmissionConfigs[name], false)
			assert.True(t, quiet(warns, err), "%s: another namespace is left alone: %v %v", name, warns, err)
		}
		_, err := w.create(enforced, "probe", nil, nadAdmissionConfigs["vf"], false)
		t.Logf("deny: %v", err)
		out, err := kubectlProbe(t, enforced)
		require.Error(t, err, "deny: kubectl apply fails")
		t.Logf("kubectl apply --dry-run=server (deny):\n%s", out)
		assert.Contains(t, out, "is forbidden: ValidatingAdmissionPolicy '"+nadpolicy.AdmissionPolicyName+"'")

		// A NAD admitted in warn mode stays, and stays editable but for its
		// spec.config.
		nads := w.client.K8sCniCncfIoV1().NetworkAttachmentDefinitions(enforced)
		_, err = nads.Patch(ctx, "uplink", types.MergePatchType, []byte(`{"metadata":{"labels":{"owner":"team-a"}}}`), metav1.PatchOptions{})
		assert.NoError(t, err, "a label on a refused NAD")
		changed, _ := json.Marshal(map[string]any{"spec": map[string]string{"config": strings.Replace(nadAdmissionConfigs["uplink"], "eth0", "eth1", 1)}})
		_, err = nads.Patch(ctx, "uplink", types.MergePatchType, changed, metav1.PatchOptions{})
		assert.True(t, refused(err), "a change of its spec.config: %v", err)
	})

	t.Run("DenyUnlessLabelled", func(t *testing.T) {
		skip := map[string]string{"nri-cni.io/nad-admission": "skip"}
		apply(t, "--mode deny --object-selector 'nri-cni.io/nad-admission notin (skip)'", generate(t,
			nadpolicy.WithMode(nadpolicy.ModeDeny), nadpolicy.WithObjectSelector("nri-cni.io/nad-admission notin (skip)")))
		require.Eventually(t, func() bool {
			_, err := w.create(other, "probe", nil, nadAdmissionConfigs["vf"], false)
			return refused(err)
		}, waitFor, 200*time.Millisecond, "the object-scoped binding never took effect")
		for _, name := range refusedNames {
			warns, err := w.create(enforced, name+"-skip", skip, nadAdmissionConfigs[name], false)
			assert.True(t, quiet(warns, err), "%s labelled skip: left alone: %v %v", name, warns, err)
			_, err = w.create(enforced, name+"-2", nil, nadAdmissionConfigs[name], false)
			assert.True(t, refused(err), "%s: %v", name, err)
		}
	})

	t.Run("HelmValues", func(t *testing.T) {
		h := newHelm(t)
		out, err := h.run(ctx, "template", "nri-cni", ChartDir(), "--namespace", "kube-system", "--show-only", "templates/nad-policy.yaml",
			"--set", "nadAdmissionPolicy.mode=deny",
			"--set-json", `nadAdmissionPolicy.namespaceSelector={"matchLabels":{"nri-cni.io/nad-admission":"enforce"}}`)
		require.NoError(t, err)
		apply(t, "helm template --set nadAdmissionPolicy.mode=deny (namespaceSelector)", []byte(out))
		require.Eventually(t, func() bool {
			return quiet(w.create(other, "probe", nil, nadAdmissionConfigs["vf"], false))
		}, waitFor, 200*time.Millisecond, "the chart's namespace-scoped binding never took effect")
		_, err = w.create(enforced, "probe", nil, nadAdmissionConfigs["vf"], false)
		assert.True(t, refused(err), "%v", err)

		out, err = h.run(ctx, "template", "nri-cni", ChartDir(), "--namespace", "kube-system", "--show-only", "templates/nad-policy.yaml")
		require.NoError(t, err)
		apply(t, "helm template (defaults: warn)", []byte(out))
		require.Eventually(t, func() bool {
			return warned(w.create(enforced, "probe", nil, nadAdmissionConfigs["vf"], false))
		}, waitFor, 200*time.Millisecond, "the chart's default binding never warned")
	})

	t.Run("MigrateCheck", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "nri-cni-k8s")
		require.NoError(t, build.GoBuild(ctx, deploy.RepoRoot(), bin, "test", runtime.GOARCH))
		cm := b.ConfigMap.DeepCopy()
		cm.Namespace, cm.ResourceVersion = enforced, ""
		_, err := c.Client.CoreV1().ConfigMaps(enforced).Create(ctx, cm, metav1.CreateOptions{})
		require.NoError(t, err)
		kubeconfig := readOnlyKubeconfig(ctx, t, c, enforced)
		run := func(args ...string) (int, string) {
			cmd := exec.CommandContext(ctx, bin, append([]string{"migrate-check", "--kubeconfig", kubeconfig,
				"--from-configmap", enforced + "/nri-cni", "-n", enforced}, args...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				require.NoError(t, err)
			}
			assert.Empty(t, stderr.String())
			return cmd.ProcessState.ExitCode(), stdout.String()
		}
		code, table := run()
		t.Logf("migrate-check -n %s (exit %d):\n%s", enforced, code, table)
		assert.Equal(t, 3, code, "NADs the policy refuses")
		for _, name := range refusedNames {
			assert.Regexp(t, `(?m)^`+enforced+` +`+name+` +`+regexp.QuoteMeta(warnedKeys[name])+` +spec\.config`, table)
		}
		assert.NotRegexp(t, `(?m)^`+enforced+` +ok `, table)
		assert.Contains(t, table, "\n4 of 5 NetworkAttachmentDefinitions refused by kubernetes.nadPolicy: "+
			"kubernetes.nadPolicy.default.ipamRanges 1, kubernetes.nadPolicy.default.masters 1, kubernetes.nadPolicy.default.types 2\n")

		code, out := run("-o", "json")
		assert.Equal(t, 3, code)
		var rep migrate.Report
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		got := map[string]string{}
		for _, n := range rep.NADs.Refused {
			got[n.Name] = n.PolicyKey
		}
		delete(warnedKeys, "ok")
		assert.Equal(t, warnedKeys, got, "migrate-check's keys are the ones the API server warned with")
		assert.Equal(t, 5, rep.NADs.Listed)
	})
}

// validationFailureAnnotation is the audit annotation a binding with the
// Audit action adds to a request its policy refuses.
const validationFailureAnnotation = "validation.policy.admission.k8s.io/validation_failure"

// nadAuditEvent is what the test reads of an audit event.
type nadAuditEvent struct {
	Verb      string `json:"verb"`
	ObjectRef struct {
		Resource, Namespace, Name string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Annotations map[string]string `json:"annotations"`
}

// nadCreates are the audit log's NAD creates (not dry runs' probes: those
// are named "probe") in namespace ns.
func nadCreates(path, ns string) ([]nadAuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []nadAuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e nadAuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", path, err)
		}
		if e.Verb == "create" && e.ObjectRef.Resource == "network-attachment-definitions" && e.ObjectRef.Namespace == ns &&
			e.ObjectRef.Name != "probe" && !strings.HasSuffix(e.ObjectRef.Name, "-2") {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// TestHelmNADAdmissionBinding: the chart builds the NAD policy's binding from
// nadAdmissionPolicy.mode and its selectors (warn in every namespace by
// default, as deploy/base), whatever binding the generated file has, and
// refuses an unknown mode.
func TestHelmNADAdmissionBinding(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	def := h.template(ctx, t, "kube-system")
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}, def.NADPolicyBinding.Spec.ValidationActions)
	assert.Nil(t, def.NADPolicyBinding.Spec.MatchResources)

	audit := h.template(ctx, t, "kube-system", "--set", "nadAdmissionPolicy.mode=audit")
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Audit}, audit.NADPolicyBinding.Spec.ValidationActions)

	// A file generated with --mode deny and a selector: the values win.
	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	cfg, err := config.Parse([]byte(b.ConfigMap.Data[deploy.ConfigKey]))
	require.NoError(t, err)
	gen, err := nadpolicy.AdmissionPolicy(cfg.Kubernetes.NADPolicyOrDefault(), cfg.Kubernetes.NADConfigLimit(),
		nadpolicy.WithMode(nadpolicy.ModeDeny), nadpolicy.WithObjectSelector("x"))
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "nad-policy.yaml")
	require.NoError(t, os.WriteFile(file, gen, 0o644))
	deny := h.template(ctx, t, "kube-system", "--set-file", "nadAdmissionPolicy.generated="+file,
		"--set", "nadAdmissionPolicy.mode=deny",
		"--set-json", `nadAdmissionPolicy.namespaceSelector={"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["telco"]}]}`,
		"--set-json", `nadAdmissionPolicy.objectSelector={"matchLabels":{"managed-by":"platform"}}`)
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, deny.NADPolicyBinding.Spec.ValidationActions)
	assert.Equal(t, &admissionv1.MatchResources{
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"telco"}}}},
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"managed-by": "platform"}},
	}, deny.NADPolicyBinding.Spec.MatchResources)
	assert.Equal(t, def.NADPolicy.Spec, deny.NADPolicy.Spec, "the same policy")

	generated := h.template(ctx, t, "kube-system", "--set-file", "nadAdmissionPolicy.generated="+file)
	assert.Equal(t, def.NADPolicyBinding.Spec, generated.NADPolicyBinding.Spec, "the values' binding, not the file's")

	_, err = h.run(ctx, "template", "nri-cni", ChartDir(), "--set", "nadAdmissionPolicy.mode=enforce")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `nadAdmissionPolicy.mode "enforce": want warn, audit or deny`)
}
