package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

var mnpGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1beta1", Resource: "multi-networkpolicies"}

// mnpShapes are valid MultiNetworkPolicies of every shape (design-42 §2.2):
// the CRD must keep each exactly (nothing pruned) and the admission policy
// must admit each without a warning.
var mnpShapes = map[string]string{
	"ipblock-except": `{"podSelector": {"matchLabels": {"app": "server"}}, "ingress": [{"from": [{"ipBlock":
		{"cidr": "10.1.0.0/16", "except": ["10.1.2.0/24", "10.1.3.0/24"]}}], "ports": [{"protocol": "TCP", "port": 80}]}]}`,
	"endport": `{"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "2001:db8::/64"}}],
		"ports": [{"protocol": "UDP", "port": 5000, "endPort": 5100}, {"protocol": "SCTP", "port": 9}]}], "policyTypes": ["Egress"]}`,
	"named-port": `{"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": "http"}, {"protocol": "UDP", "port": "dns-udp"}]}]}`,
	"both-selectors": `{"podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
		{"key": "canary", "operator": "DoesNotExist"}]}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}},
		"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]},
		{"key": "env", "operator": "Exists"}]}}, {"namespaceSelector": {}}, {"podSelector": {}}]}]}`,
	"policy-types": `{"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{"to": [], "ports": []}]}`,
	"deny-all":     `{"podSelector": {}, "policyTypes": ["Ingress"]}`,
}

// mnpObject is a MultiNetworkPolicy with spec (JSON) and, unless
// policyFor is "-", the policy-for annotation.
func mnpObject(t *testing.T, ns, name, policyFor, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	require.NoError(t, json.Unmarshal([]byte(spec), &s), name)
	md := map[string]any{"name": name, "namespace": ns}
	if policyFor != "-" {
		md["annotations"] = map[string]any{"k8s.v1.cni.cncf.io/policy-for": policyFor}
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1beta1",
		"kind": "MultiNetworkPolicy", "metadata": md, "spec": s}}
}

// aShapedCRD writes our CRD minus v1beta1's endPort: the CRD of
// multi-networkpolicy's scheme.yml (variant A, design-42 §1.1), which
// many clusters installed following upstream's README.
func aShapedCRD(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deploy.RepoRoot(), deploy.MNPCRDDir, deploy.MNPCRDFile))
	require.NoError(t, err)
	var crd map[string]any
	require.NoError(t, yaml.Unmarshal(data, &crd))
	v1beta1 := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
	require.Equal(t, "v1beta1", v1beta1["name"])
	spec := v1beta1["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)
	for _, dir := range []string{"ingress", "egress"} {
		port := spec["properties"].(map[string]any)[dir].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)["ports"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)
		require.Contains(t, port, "endPort")
		delete(port, "endPort")
	}
	out, err := json.Marshal(crd)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "crd-a.json")
	require.NoError(t, os.WriteFile(path, out, 0o600))
	return path
}

// TestMNPCRDAndAdmission, on a real API server:
//   - the A-shaped CRD (upstream's older one, no v1beta1 endPort) holds
//     policies; ours applied over it, then it over ours, then ours again,
//     changes no stored object (resourceVersions and content) and keeps
//     the version list (v1beta1 served and stored, v1beta2 listed) and
//     storedVersions;
//   - objects of every shape round-trip unchanged under ours (nothing
//     pruned: endPort, except, named ports, both selectors, policyTypes);
//   - `kubectl get multi-policy` (the short name) lists them;
//   - deploy/multinetworkpolicy's admission policy type-checks against the
//     CRD (no warnings), admits every valid shape without a warning, and
//     warns (Warn+Audit: admitted) on each class of bad input, naming the
//     field; an UPDATE of labels only is not judged again.
//
// On kube-apiserver v1.34.4 alone (the oldest served; its CEL environment
// is 1.33's; no node, nothing of the host touched) and on a whole cluster
// of the default version, whose controller-manager type-checks the policy.
func TestMNPCRDAndAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Run("oldest-api-only", func(t *testing.T) {
		tools, err := cluster.EnsureTools(ctx)
		require.NoError(t, err)
		old, err := cluster.EnsureAPIServer(ctx)
		require.NoError(t, err)
		start := time.Now()
		c, err := cluster.StartAPIOnly(ctx, cluster.APIOnlyOpts{APIServer: old.Bin, Version: old.Version, Tools: tools})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
		t.Logf("kube-apiserver %s alone up in %s", old.Version, time.Since(start).Round(time.Millisecond))
		checkMNP(ctx, t, c, false)
	})
	t.Run("cluster", func(t *testing.T) {
		testenv.RequireRoot(t)
		start := time.Now()
		c, err := cluster.Start(ctx, cluster.Opts{Logf: t.Logf})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
		t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))
		checkMNP(ctx, t, c, true)
	})
}

// checkMNP runs TestMNPCRDAndAdmission's checks on c; typeCheck: wait for
// the controller-manager's type checking of the policy and require no
// warning from it.
func checkMNP(ctx context.Context, t *testing.T, c *cluster.Cluster, typeCheck bool) {
	apply := func(args ...string) {
		t.Helper()
		out, err := c.Kubectl(ctx, append([]string{"apply"}, args...)...)
		require.NoError(t, err, out)
		t.Logf("kubectl apply %s: %s", strings.Join(args, " "), strings.TrimSpace(out))
		if args[0] == "-f" {
			out, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=2m", "crd/"+deploy.MNPCRDName)
			require.NoError(t, err, out)
		}
	}
	type versions struct {
		Spec struct {
			Versions []struct {
				Name            string `json:"name"`
				Served, Storage bool
			} `json:"versions"`
		} `json:"spec"`
		Status struct {
			StoredVersions []string `json:"storedVersions"`
			AcceptedNames  struct {
				ShortNames []string `json:"shortNames"`
			} `json:"acceptedNames"`
		} `json:"status"`
	}
	crdVersions := func() versions {
		t.Helper()
		out, err := c.Kubectl(ctx, "get", "crd", deploy.MNPCRDName, "-o", "json")
		require.NoError(t, err)
		var v versions
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		return v
	}

	ns := harness.RandomName("mnp-")
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	require.NoError(t, err)
	mnps := dyn.Resource(mnpGVR).Namespace(ns)
	// stored: name -> resourceVersion and spec (JSON) of every policy.
	stored := func() map[string][2]string {
		t.Helper()
		list, err := mnps.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		out := map[string][2]string{}
		for _, o := range list.Items {
			spec, err := json.Marshal(o.Object["spec"])
			require.NoError(t, err)
			out[o.GetName()] = [2]string{o.GetResourceVersion(), string(spec)}
		}
		return out
	}

	// Under the A-shaped CRD: policies without endPort.
	apply("-f", aShapedCRD(t))
	underA := crdVersions()
	for _, name := range []string{"ipblock-except", "named-port", "both-selectors"} {
		_, err := mnps.Create(ctx, mnpObject(t, ns, "a-"+name, "net1", mnpShapes[name]), metav1.CreateOptions{})
		require.NoError(t, err, name)
	}
	before := stored()
	ours := filepath.Join(deploy.RepoRoot(), deploy.MNPCRDDir, deploy.MNPCRDFile)
	apply("-f", ours)
	assert.Equal(t, before, stored(), "ours over the A-shaped CRD: no stored object changed")
	assert.Equal(t, underA.Spec.Versions, crdVersions().Spec.Versions, "same version list")
	assert.Equal(t, []string{"v1beta1"}, crdVersions().Status.StoredVersions)

	// Under ours: every shape round-trips unchanged.
	for name, spec := range mnpShapes {
		obj := mnpObject(t, ns, name, "net1, other-ns/net2", spec)
		_, err := mnps.Create(ctx, obj, metav1.CreateOptions{})
		require.NoError(t, err, name)
		got, err := mnps.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, name)
		gotSpec, err := json.Marshal(got.Object["spec"])
		require.NoError(t, err)
		assert.JSONEq(t, spec, string(gotSpec), "%s: stored as written (nothing pruned)", name)
	}
	out, err := c.Kubectl(ctx, "get", "multi-policy", "-n", ns, "-o", "name")
	require.NoError(t, err, "kubectl get multi-policy")
	assert.Len(t, strings.Fields(out), len(mnpShapes)+3, "kubectl get multi-policy lists them: %s", out)
	assert.Equal(t, []string{"multi-policy"}, crdVersions().Status.AcceptedNames.ShortNames)

	// The reverse, and back: no stored object changes.
	before = stored()
	apply("-f", aShapedCRD(t))
	afterA := stored()
	for name, s := range before {
		assert.Equal(t, s[0], afterA[name][0], "%s: the A-shaped CRD over ours rewrites no object", name)
	}
	apply("-f", ours)
	assert.Equal(t, before, stored(), "ours again: every object as it was, endPort included")

	// The admission policy (the component alone: RBAC and the policy).
	apply("-k", filepath.Join(deploy.RepoRoot(), deploy.MNPDir))
	if typeCheck {
		waitTypeChecked(ctx, t, c, deploy.MNPPolicyName)
	}
	warn := &warnings{}
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.WarningHandler = warn
	wdyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	w := wdyn.Resource(mnpGVR).Namespace(ns)
	create := func(obj *unstructured.Unstructured) []string {
		t.Helper()
		obj.SetName(harness.RandomName("p-"))
		warn.take()
		_, err := w.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "Warn+Audit: admitted")
		return warn.take()
	}
	bad := mnpObject(t, ns, "x", "-", `{"podSelector": {}}`)
	require.Eventually(t, func() bool { return len(create(bad.DeepCopy())) > 0 }, waitFor, 200*time.Millisecond,
		"the policy never warned")
	for name, spec := range mnpShapes {
		assert.Empty(t, create(mnpObject(t, ns, "x", "net1, other-ns/net2", spec)), "%s: valid, no warning", name)
	}
	assert.Empty(t, create(mnpObject(t, ns, "x", " a/b ,, c.d ", `{"podSelector": {}}`)), "policy-for as the nodes parse it")

	// At the caps, the largest policies an object can hold still evaluate
	// within the API server's CEL cost budget (over it, the evaluation
	// error would come back as a warning here).
	many := func(n int, item string) string { return strings.TrimSuffix(strings.Repeat(item+",", n), ",") }
	for name, spec := range map[string]string{
		"64 x 64 ipBlock peers with excepts": `{"podSelector": {}, "ingress": [` + many(64, `{"from": [`+
			many(64, `{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16", "10.4.0.0/16"]}}`)+
			`], "ports": [`+many(64, `{"protocol": "TCP", "port": 1000, "endPort": 2000}`)+`]}`) + `]}`,
		"64 x 64 selector peers": `{"podSelector": {}, "egress": [` + many(64, `{"to": [`+
			many(64, `{"podSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1","2","3","4","5","6","7","8"]}]},`+
				` "namespaceSelector": {"matchLabels": {"team": "x"}}}`)+`]}`) + `]}`,
	} {
		start := time.Now()
		assert.Empty(t, create(mnpObject(t, ns, "x", "net1", spec)), "%s (%d bytes): within the cost budget, no warning", name, len(spec))
		t.Logf("%s (%d bytes): admitted in %s", name, len(spec), time.Since(start).Round(time.Millisecond))
	}

	for _, tc := range []struct{ name, policyFor, spec, want string }{
		{"no policy-for", "-", `{"podSelector": {}}`, "policy-for]: missing or empty"},
		{"empty policy-for", " , ", `{"podSelector": {}}`, "policy-for]: missing or empty"},
		{"policy-for a/b/c", "net1, a/b/c", `{"podSelector": {}}`, `"a/b/c": not "name" or "namespace/name"`},
		{"policy-for upper case", "Net1", `{"podSelector": {}}`, `"Net1": not`},
		{"33 networks", many(33, "n"), `{"podSelector": {}}`, "over a cap"},
		{"policyTypes", "n", `{"podSelector": {}, "policyTypes": ["ingress"]}`, "spec.policyTypes"},
		{"protocol", "n", `{"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}`, "protocol: must be TCP, UDP or SCTP"},
		{"port 0", "n", `{"podSelector": {}, "ingress": [{"ports": [{"port": 0}]}]}`, "port: must be 1-65535"},
		{"port 65536", "n", `{"podSelector": {}, "egress": [{"ports": [{"port": 65536}]}]}`, "port: must be 1-65535"},
		{"port name", "n", `{"podSelector": {}, "ingress": [{"ports": [{"port": "Bad_Name"}]}]}`, "port: must be 1-65535"},
		{"endPort named", "n", `{"podSelector": {}, "ingress": [{"ports": [{"port": "http", "endPort": 90}]}]}`, "endPort: only with a numeric port"},
		{"endPort alone", "n", `{"podSelector": {}, "ingress": [{"ports": [{"endPort": 90}]}]}`, "endPort: only with a numeric port"},
		{"endPort below", "n", `{"podSelector": {}, "egress": [{"ports": [{"port": 90, "endPort": 80}]}]}`, "endPort: must be at least port"},
		{"peer both", "n", `{"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]}`, "exactly one kind"},
		{"peer empty", "n", `{"podSelector": {}, "egress": [{"to": [{}]}]}`, "exactly one kind"},
		{"cidr", "n", `{"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.1"}}]}]}`, "ipBlock.cidr: not a CIDR"},
		{"except outside", "n", `{"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}]}`, "ipBlock.except"},
		{"except not a cidr", "n", `{"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["x"]}}]}]}`, "ipBlock.except"},
		{"operator", "n", `{"podSelector": {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}}`, "operator must be"},
		{"In without values", "n", `{"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]}]}`, "operator must be"},
		{"Exists with values", "n", `{"podSelector": {}, "egress": [{"to": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]}}]}]}`, "operator must be"},
		{"65 rules", "n", `{"podSelector": {}, "ingress": [` + many(65, "{}") + `]}`, "over a cap"},
		{"65 peers", "n", `{"podSelector": {}, "ingress": [{"from": [` + many(65, `{"podSelector": {}}`) + `]}]}`, "over a cap"},
		{"65 ports", "n", `{"podSelector": {}, "egress": [{"ports": [` + many(65, `{"port": 80}`) + `]}]}`, "over a cap"},
		{"65 excepts", "n", `{"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [` +
			many(65, `"10.1.0.0/16"`) + `]}}]}]}`, "over a cap"},
		{"33 terms", "n", `{"podSelector": {"matchLabels": {` + func() string {
			var kv []string
			for i := 0; i < 33; i++ {
				kv = append(kv, fmt.Sprintf(`"k%d": "v"`, i))
			}
			return strings.Join(kv, ",")
		}() + `}}}`, "over a cap"},
		{"65 values", "n", `{"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": [` +
			many(65, `"v"`) + `]}]}}]}]}`, "over a cap"},
	} {
		got := create(mnpObject(t, ns, "x", tc.policyFor, tc.spec))
		if assert.NotEmpty(t, got, "%s: a warning", tc.name) {
			assert.Contains(t, strings.Join(got, "\n"), tc.want, "%s", tc.name)
			t.Logf("%s: %s", tc.name, got)
		}
	}

	// An UPDATE that changes neither the spec nor policy-for is not judged.
	obj, err := w.Create(ctx, mnpObject(t, ns, "unjudged", "-", `{"podSelector": {}}`), metav1.CreateOptions{})
	require.NoError(t, err)
	warn.take()
	obj.SetLabels(map[string]string{"touched": "yes"})
	_, err = w.Update(ctx, obj, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Empty(t, warn.take(), "a labels-only update: no warning")
}
