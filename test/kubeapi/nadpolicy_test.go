package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	"github.com/nri-cni/nri-cni/nadpolicy/policytest"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// policyKeyRe finds the policy key a refusal names: "(kubernetes.… ," or
// "(kubernetes.…)", as both the node's Violation and the VAP's messages
// write it.
var policyKeyRe = regexp.MustCompile(`\((kubernetes\.(?:nadPolicy(?:\.default|\.namespaces\.[a-z0-9-]+)?(?:\.[a-zA-Z]+)?|maxNADConfigBytes))[,)]`)

// TestNADPolicyEquivalence puts policytest's table to nadpolicy.Check (the
// node) and to a real API server with deploy/base's CRD and the VAP that
// nadpolicy.AdmissionPolicy generates for the same policy: the verdicts
// agree on every row and the refusals name the same policy key, except on
// the rows the table marks (the VAP stricter; malformed JSON the node
// refuses and the VAP admits).
func TestNADPolicyEquivalence(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Opts{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
	t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))

	crd := filepath.Join(deploy.RepoRoot(), "deploy", "base", "crd-networkattachmentdefinitions.yaml")
	_, err = c.Kubectl(ctx, "apply", "-f", crd)
	require.NoError(t, err)
	_, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m", "crd/network-attachment-definitions.k8s.cni.cncf.io")
	require.NoError(t, err)
	nads, err := nadclient.NewForConfig(c.RESTConfig)
	require.NoError(t, err)

	teamNS, telcoNS := harness.RandomName("nadp-team-"), harness.RandomName("nadp-telco-")
	for _, ns := range []string{teamNS, telcoNS} {
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			assert.NoError(t, c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}))
		})
	}
	nsOf := func(symbolic string) string {
		if symbolic == policytest.Telco {
			return telcoNS
		}
		return teamNS
	}

	// A NAD the policy refuses, created before the VAP: it stays editable
	// as long as its spec.config does not change.
	legacy := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: teamNS},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion":"1.0.0","name":"l","type":"bridge","bridge":"cni0"}`}}
	legacy, err = nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(teamNS).Create(ctx, legacy, metav1.CreateOptions{})
	require.NoError(t, err)

	pol := policytest.Policy(telcoNS)
	vap, err := nadpolicy.AdmissionPolicy(pol, policytest.MaxBytes, nadpolicy.WithMode(nadpolicy.ModeDeny))
	require.NoError(t, err)
	vapFile := filepath.Join(t.TempDir(), "nad-policy.yaml")
	require.NoError(t, os.WriteFile(vapFile, vap, 0o644))
	out, err := c.Kubectl(ctx, "apply", "-f", vapFile)
	require.NoError(t, err, out)
	t.Cleanup(func() {
		_, err := c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", vapFile)
		assert.NoError(t, err)
	})
	node, err := nadpolicy.New(pol)
	require.NoError(t, err)

	apiVerdict := func(ns, config string) (string, error) {
		obj := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: harness.RandomName("nad-"), Namespace: ns},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
		_, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Create(ctx, obj,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return refusalKey(err), err
	}
	// The VAP takes effect once the API server has compiled it.
	waitStart := time.Now()
	require.Eventually(t, func() bool {
		_, err := apiVerdict(teamNS, `{"name":"x","type":"host-device","device":"eth0"}`)
		return err != nil && strings.Contains(err.Error(), nadpolicy.AdmissionPolicyName)
	}, waitFor, 200*time.Millisecond, "the VAP never refused")
	t.Logf("VAP active after %s", time.Since(waitStart).Round(time.Millisecond))
	waitTypeChecked(ctx, t, c, nadpolicy.AdmissionPolicyName)

	var report, messages strings.Builder
	fmt.Fprintf(&report, "%-58s %-10s %-46s %s\n", "case", "namespace", "node", "API server")
	judged := time.Now()
	for _, tc := range policytest.Cases() {
		ns := nsOf(tc.Namespace)
		nodeErr := nadpolicy.CheckSize([]byte(tc.Config), policytest.MaxBytes)
		if nodeErr == nil {
			nodeErr = node.Check(ns, []byte(tc.Config))
		}
		nodeKey := refusalKey(nodeErr)
		apiKey, apiErr := apiVerdict(ns, tc.Config)
		fmt.Fprintf(&report, "%-58s %-10s %-46s %s\n", tc.Name, tc.Namespace, orAllowed(nodeKey), orAllowed(apiKey))
		if nodeErr != nil || apiErr != nil {
			fmt.Fprintf(&messages, "%s\n  node: %v\n  API:  %s\n", tc.Name, nodeErr, denial(apiErr))
		}

		wantNode := policytest.Key(tc.Node, tc.Namespace, telcoNS)
		assert.Equal(t, wantNode, nodeKey, "%s: node: %v", tc.Name, nodeErr)
		switch {
		case tc.VAP == policytest.VAPAdmits:
			assert.NoError(t, apiErr, "%s: the VAP admits malformed JSON (the node refuses it)", tc.Name)
		case tc.VAP != "":
			assert.Equal(t, policytest.Key(tc.VAP, tc.Namespace, telcoNS), apiKey, "%s: the VAP is stricter here: %v", tc.Name, apiErr)
		default:
			assert.Equal(t, nodeKey, apiKey, "%s: node %v\nAPI server %v", tc.Name, nodeErr, apiErr)
		}
	}
	t.Logf("%d cases judged by both in %s\n%s", len(policytest.Cases()), time.Since(judged).Round(time.Millisecond), report.String())
	t.Logf("messages:\n%s", messages.String())

	// deploy/base's nad-policy.yaml (the generator's output for its
	// ConfigMap, TestShippedAdmissionPolicyIsGenerated) in place of the
	// table's: what it lets through and what it warns about (its binding
	// warns: TestNADAdmission).
	t.Run("Shipped", func(t *testing.T) {
		shipped := filepath.Join(deploy.RepoRoot(), "deploy", "base", "nad-policy.yaml")
		out, err := c.Kubectl(ctx, "apply", "-f", shipped)
		require.NoError(t, err, out)
		waitTypeChecked(ctx, t, c, nadpolicy.AdmissionPolicyName)
		w := newNADWriter(ctx, t, c.RESTConfig)
		warnVerdict := func(ns, config string) (string, error) {
			warns, err := w.create(ns, harness.RandomName("nad-"), nil, config, false)
			if err != nil || len(warns) == 0 {
				return "", err
			}
			return refusalKey(errors.New(strings.Join(warns, "\n"))), nil
		}
		require.Eventually(t, func() bool {
			key, err := warnVerdict(teamNS, `{"name":"x","type":"host-device","device":"eth0"}`)
			return err == nil && key != ""
		}, waitFor, 200*time.Millisecond, "the shipped policy never warned")
		ok := `{"cniVersion":"1.0.0","name":"t","plugins":[{"bridge":"nad-team","ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.251.7.0/24"}]],"type":"host-local"},"isGateway":false,"type":"bridge"},{"capabilities":{"mac":true},"type":"tuning"}]}`
		key, err := warnVerdict(teamNS, ok)
		assert.NoError(t, err)
		assert.Empty(t, key, "the shipped policy admits a nad-* bridge in 10.251.0.0/16 without a warning")
		for cfg, key := range map[string]string{
			`{"cniVersion":"1.0.0","name":"t","type":"host-device","device":"eth0"}`:                                                   "kubernetes.nadPolicy.default.types",
			`{"cniVersion":"1.0.0","name":"t","type":"macvlan","master":"eth0"}`:                                                       "kubernetes.nadPolicy.default.masters",
			`{"cniVersion":"1.0.0","name":"t","type":"bridge","bridge":"cni0"}`:                                                        "kubernetes.nadPolicy.default.bridges",
			`{"cniVersion":"1.0.0","name":"t","type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.244.0.0/16"}}`: "kubernetes.nadPolicy.default.ipamRanges",
		} {
			key2, err := warnVerdict(telcoNS, cfg)
			assert.NoError(t, err, "admitted (warn)")
			assert.Equal(t, key, key2, "%s: warned about", cfg)
		}

		// The table's policy (deny) back for the next subtest.
		out, err = c.Kubectl(ctx, "apply", "-f", vapFile)
		require.NoError(t, err, out)
		require.Eventually(t, func() bool {
			_, err := apiVerdict(teamNS, `{"name":"x","type":"host-device","device":"eth0"}`)
			return err != nil
		}, waitFor, 200*time.Millisecond, "the table's policy never refused again")
	})

	t.Run("UpdateKeepsUnchangedConfig", func(t *testing.T) {
		legacy.Labels = map[string]string{"touched": "yes"}
		l, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(teamNS).Update(ctx, legacy, metav1.UpdateOptions{})
		require.NoError(t, err, "an update that leaves spec.config alone is not judged")
		l.Spec.Config = `{"cniVersion":"1.0.0","name":"l","type":"bridge","bridge":"cni1"}`
		_, err = nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(teamNS).Update(ctx, l, metav1.UpdateOptions{})
		assert.Equal(t, "kubernetes.nadPolicy.default.bridges", refusalKey(err), "%v", err)
		l.Spec.Config = `{"cniVersion":"1.0.0","name":"l","type":"bridge","bridge":"nad-l"}`
		_, err = nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(teamNS).Update(ctx, l, metav1.UpdateOptions{})
		assert.NoError(t, err)
	})
}

// refusalKey is the policy key err names ("" for nil; the whole message if
// it names none, so a mismatch shows it).
func refusalKey(err error) string {
	if err == nil {
		return ""
	}
	var v *nadpolicy.Violation
	if errors.As(err, &v) {
		return v.PolicyKey
	}
	if m := policyKeyRe.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return err.Error()
}

// shippedNADPolicy is deploy/base's kubernetes.nadPolicy, compiled.
func shippedNADPolicy(t *testing.T) *nadpolicy.Policy {
	t.Helper()
	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	cfg, err := config.Parse([]byte(b.ConfigMap.Data[deploy.ConfigKey]))
	require.NoError(t, err)
	require.NotNil(t, cfg.Kubernetes)
	p, err := nadpolicy.New(cfg.Kubernetes.NADPolicyOrDefault())
	require.NoError(t, err)
	return p
}

// denial is the policy's own words in an API error (nil: "admitted").
func denial(err error) string {
	if err == nil {
		return "admitted"
	}
	if _, msg, ok := strings.Cut(err.Error(), "denied request: "); ok {
		return msg
	}
	return err.Error()
}

func orAllowed(key string) string {
	if key == "" {
		return "allowed"
	}
	return strings.TrimPrefix(key, "kubernetes.")
}

// TestHelmNADAdmissionPolicy: the chart renders the NAD admission policy
// only when it was generated from the release's kubernetes.nadPolicy and
// maxNADConfigBytes; the documented way to regenerate it works.
func TestHelmNADAdmissionPolicy(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	changed := []string{"--set", "kubernetes.nadPolicy.namespaces.telco.types={macvlan},kubernetes.nadPolicy.namespaces.telco.masters={ens2f0}"}

	_, err := h.run(ctx, append([]string{"template", "nri-cni", ChartDir()}, changed...)...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nadAdmissionPolicy: generated from another kubernetes.nadPolicy")
	_, err = h.run(ctx, "template", "nri-cni", ChartDir(), "--set", "kubernetes.maxNADConfigBytes=8192")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "another kubernetes.maxNADConfigBytes")

	// values.yaml's recipe: render nri.conf without the policy, generate, pass it.
	cm, err := h.run(ctx, append([]string{"template", "nri-cni", ChartDir(), "--set", "nadAdmissionPolicy.enabled=false",
		"--show-only", "templates/configmap.yaml"}, changed...)...)
	require.NoError(t, err)
	var o deploy.Objects
	require.NoError(t, o.Decode("configmap", []byte(cm)))
	cfg, err := config.Parse([]byte(o.ConfigMap.Data[deploy.ConfigKey]))
	require.NoError(t, err)
	gen, err := nadpolicy.AdmissionPolicy(cfg.Kubernetes.NADPolicyOrDefault(), cfg.Kubernetes.NADConfigLimit())
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "nad-policy.yaml")
	require.NoError(t, os.WriteFile(file, gen, 0o644))
	r := h.template(ctx, t, "kube-system", append(changed, "--set-file", "nadAdmissionPolicy.generated="+file)...)
	assert.Empty(t, r.Missing())
	assert.Contains(t, variableOf(r, "masters"), "variables.rule == 'telco' ? r'(?:ens2f0)'")
	assert.Equal(t, "nri-cni", r.NADPolicy.Labels["app.kubernetes.io/instance"], "the chart's labels")
}

func variableOf(o *deploy.Objects, name string) string {
	for _, v := range o.NADPolicy.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}
