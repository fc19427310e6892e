package kubeapi

// Issue 28 against a real API server and scheduler: tenants' NADs and
// ResourceClaims never break what others publish or claim. One node of the
// fleet simulation (test/fleet: nri-cni's real Kubernetes-mode code, its
// DRA driver publishing through the ResourceSlice controller with the
// node-bound token, deploy/base applied as shipped, its admission policies
// included) and tenants in three namespaces:
//   - a NAD named with 200 characters does not make the node's slice
//     invalid: it is published (under a shortened network attribute), and so
//     is every NAD created after it;
//   - a namespace over kubernetes.dra.maxDevicesPerNamespace gets its share,
//     a Warning Event on the NAD left out, and another namespace's NAD is
//     published meanwhile;
//   - deploy/base's claim policy (dra-claim-policy.yaml) keeps a claim of
//     namespace team-b from team-a's devices at scheduling — the pod stays
//     unschedulable, team-a's devices stay free — while team-b's own and the
//     node's shared networks are allocated, from a claim or a template;
//   - selectors on namespace and cniVersion need no guard: every device has
//     them.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/fleet"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// tenantNAD is a NAD deploy/base's NAD policy allows (a bridge nad-*,
// host-local in 10.251.0.0/16).
func tenantNAD(ns, name string, i int) *nadv1.NetworkAttachmentDefinition {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"t%d","plugins":[{"type":"bridge","bridge":"nad-t%d",`+
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.251.%d.0/24"}]]}}]}`, i, i, 100+i)
	return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: conf}}
}

func TestDRATenants(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Opts{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
	sv, err := c.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	t.Logf("cluster up in %s, API server %s", time.Since(start).Round(time.Millisecond), sv.GitVersion)

	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	logger.SetOutput(testWriter{t})
	f, err := fleet.New(ctx, c, t.TempDir(), 0, logrus.NewEntry(logger))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	f.Configure(func(cfg *config.Config) { cfg.Kubernetes.DRA.MaxDevicesPerNamespace = 2 })
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	nodes, err := f.Grow(ctx, 1, 1)
	require.NoError(t, err)
	node := nodes[0].Name
	nc, err := nadclient.NewForConfig(c.RESTConfig)
	require.NoError(t, err)

	t.Run("NADs", func(t *testing.T) { checkTenantNADs(ctx, t, c, nc, node) })
	t.Run("ClaimPolicy", func(t *testing.T) { checkClaimNamespaces(ctx, t, c, node) })
}

// testWriter sends the agents' warnings to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// nodeDevices is the node's published devices, by network attribute.
func nodeDevices(ctx context.Context, client kubernetes.Interface, node string) (map[string]resourcev1.Device, error) {
	l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	out := map[string]resourcev1.Device{}
	for _, s := range l.Items {
		if s.Spec.Driver != dra.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes[dra.AttrNetwork]; ok && a.StringValue != nil {
				out[*a.StringValue] = d
			}
		}
	}
	return out, nil
}

// checkTenantNADs: a 200-character NAD name and a namespace over its share
// break nothing for the others.
func checkTenantNADs(ctx context.Context, t *testing.T, c *cluster.Cluster, nc nadclient.Interface, node string) {
	long := strings.Repeat("long-name-", 19) + "long-name0" // 200 characters
	var made []*nadv1.NetworkAttachmentDefinition
	for i, n := range []*nadv1.NetworkAttachmentDefinition{
		tenantNAD("team-a", long, 1),
		tenantNAD("team-a", "storage", 2),
		tenantNAD("team-b", "storage", 3),
		tenantNAD("team-c", "one", 4),
		tenantNAD("team-c", "three", 5),
		tenantNAD("team-c", "two", 6), // past team-c's share of 2: "three" and "two" sort after "one"
	} {
		got, err := nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions(n.Namespace).Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err, "NAD %d %s/%s", i, n.Namespace, n.Name)
		made = append(made, got)
	}
	longAttr := dra.NetworkAttr("team-a/" + long)
	want := []string{"secondary", longAttr, "team-a/storage", "team-b/storage", "team-c/one", "team-c/three"}
	var devs map[string]resourcev1.Device
	require.Eventually(t, func() bool {
		var err error
		devs, err = nodeDevices(ctx, c.Client, node)
		if err != nil {
			return false
		}
		for _, w := range want {
			if _, ok := devs[w]; !ok {
				return false
			}
		}
		return true
	}, waitFor, 200*time.Millisecond, "the node publishes every tenant's NADs, the 200-character one too")
	t.Logf("node %s publishes %d devices; the 200-character NAD as %q", node, len(devs), longAttr)
	assert.NotContains(t, devs, "team-c/two", "past team-c's share (maxDevicesPerNamespace 2)")
	d := devs[longAttr]
	assert.Equal(t, "team-a", *d.Attributes[dra.AttrNamespace].StringValue)
	for network, d := range devs {
		for name, a := range d.Attributes {
			if a.StringValue != nil {
				assert.LessOrEqual(t, len(*a.StringValue), 64, "%s: %s", network, name)
			}
		}
	}

	// The NAD left out is told so, on the NAD.
	two := made[5]
	require.Eventually(t, func() bool {
		l, err := c.Client.CoreV1().Events("team-c").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range l.Items {
			if e.InvolvedObject.Name == two.Name && e.InvolvedObject.Kind == "NetworkAttachmentDefinition" &&
				e.Reason == kube.ReasonDRANotPublished && e.Type == corev1.EventTypeWarning {
				t.Logf("Event on NAD team-c/two: %s", e.Message)
				assert.Contains(t, e.Message, "kubernetes.dra.maxDevicesPerNamespace (2)")
				assert.Equal(t, two.UID, e.InvolvedObject.UID)
				return true
			}
		}
		return false
	}, waitFor, 200*time.Millisecond, "a Warning Event on the NAD left out")
}

// readyNode gives the simulated node what the scheduler needs to place
// pods there (it has no kubelet to report it).
func readyNode(ctx context.Context, t *testing.T, client kubernetes.Interface, node string) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[corev1.LabelHostname] = node
	n, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	res := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("16Gi")}
	n.Status.Capacity, n.Status.Allocatable = res, res
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Simulated",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// claimPod is a pod of ns on node with one claim (by name, or from a
// template), tolerating the simulated node's taints.
func claimPod(ns, name, node string, rc corev1.PodResourceClaim) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelHostname: node},
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: ptr.To(false),
			ResourceClaims:               []corev1.PodResourceClaim{rc},
			Containers: []corev1.Container{{Name: "app", Image: "localhost/pause:local",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: rc.Name}}}}}}}
}

// deviceClaim is a claim spec of one request of class nri-cni.io with the
// selectors.
func deviceClaim(selectors ...string) resourcev1.ResourceClaimSpec {
	var sel []resourcev1.DeviceSelector
	for _, s := range selectors {
		sel = append(sel, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "net",
		Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.DriverName, Selectors: sel}}}}}
}

func networkIs(network string) string {
	return fmt.Sprintf(`device.attributes[%q].%s == %q`, dra.DriverName, dra.AttrNetwork, network)
}

// checkClaimNamespaces: the claim policy keeps a claim to its namespace's
// and the shared devices, at scheduling.
func checkClaimNamespaces(ctx context.Context, t *testing.T, c *cluster.Cluster, node string) {
	admin := c.Client
	readyNode(ctx, t, admin, node)
	const ns = "team-b"
	claims := admin.ResourceV1().ResourceClaims(ns)

	// The policy takes effect once the API server has seen it: a claim's
	// spec shows it (dry run).
	var probe *resourcev1.ResourceClaim
	require.Eventually(t, func() bool {
		var err error
		probe, err = claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"},
			Spec: deviceClaim(networkIs("team-b/storage"))}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(probe.Spec.Devices.Requests[0].Exactly.Selectors) == 2
	}, waitFor, 200*time.Millisecond, "the claim policy adds its selector")
	added := probe.Spec.Devices.Requests[0].Exactly.Selectors[1].CEL.Expression
	t.Logf("selector added to a claim of %s: %s", ns, added)
	assert.Contains(t, added, `device.attributes["nri-cni.io"].namespace == "team-b"`)

	// Every request and subrequest gets it, those without selectors too;
	// one that ends with it already is left as it is.
	multi := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
		{Name: "plain", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.DriverName}},
		{Name: "done", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.DriverName,
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: added}}}}},
		{Name: "either", FirstAvailable: []resourcev1.DeviceSubRequest{
			{Name: "a", DeviceClassName: dra.DriverName},
			{Name: "b", DeviceClassName: "other.example.com",
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}}}}},
	}}}
	got, err := claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "multi-"}, Spec: multi},
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	last := func(sel []resourcev1.DeviceSelector) string { return sel[len(sel)-1].CEL.Expression }
	r := got.Spec.Devices.Requests
	require.Len(t, r[0].Exactly.Selectors, 1)
	assert.Equal(t, added, last(r[0].Exactly.Selectors))
	assert.Len(t, r[1].Exactly.Selectors, 1, "not added twice")
	require.Len(t, r[2].FirstAvailable[0].Selectors, 1)
	assert.Equal(t, added, last(r[2].FirstAvailable[0].Selectors))
	require.Len(t, r[2].FirstAvailable[1].Selectors, 2, "another driver's subrequest too: the selector lets its devices through")
	assert.Equal(t, added, last(r[2].FirstAvailable[1].Selectors))

	// The attack, without the policy's binding: team-b's claim gets
	// team-a's device (and would hold it while nri-cni refuses it at
	// prepare). Then the binding is back.
	bindings := admin.AdmissionregistrationV1().MutatingAdmissionPolicyBindings()
	binding, err := bindings.Get(ctx, "nri-cni-dra-claim-namespaces", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		p, err := claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"},
			Spec: deviceClaim(networkIs("team-b/storage"))}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(p.Spec.Devices.Requests[0].Exactly.Selectors) == 1
	}, waitFor, 200*time.Millisecond, "the claim policy unbound")
	claimTakes(ctx, t, c, node, ns, "attack-without-policy", []string{networkIs("team-a/storage")}, false, "team-a/storage")
	binding.ResourceVersion, binding.UID = "", ""
	_, err = bindings.Create(ctx, binding, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"},
			Spec: deviceClaim(networkIs("team-b/storage"))}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(p.Spec.Devices.Requests[0].Exactly.Selectors) == 2
	}, waitFor, 200*time.Millisecond, "the claim policy bound again")

	for _, tc := range []struct {
		name      string
		selectors []string
		template  bool
		allocated bool
	}{
		{"another namespace's NAD", []string{networkIs("team-a/storage")}, false, false},
		{"another namespace's NAD, from a template", []string{networkIs("team-a/storage")}, true, false},
		{"any device, so team-a's are there to take", nil, false, true},
		{"its own namespace's NAD", []string{networkIs("team-b/storage")}, false, true},
		{"its own namespace's NAD, from a template", []string{networkIs("team-b/storage")}, true, true},
		{"the node's shared network", []string{networkIs("secondary")}, false, true},
		{"unguarded selectors on namespace and cniVersion",
			[]string{`device.attributes["nri-cni.io"].namespace == "team-b"`,
				`device.attributes["nri-cni.io"].cniVersion.isGreaterThan(semver("0.4.0"))`}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ToLower(strings.NewReplacer(" ", "-", "'", "", ",", "").Replace(tc.name))
			want := ""
			if tc.allocated {
				want = "team-b or shared"
			}
			sel := claimTakes(ctx, t, c, node, ns, name, tc.selectors, tc.template, want)
			if tc.allocated {
				assert.Equal(t, added, sel, "the claim carries the policy's selector")
			}
		})
	}
}

// claimTakes creates a claim (or a template) of ns with selectors and a pod
// using it on node, waits until the scheduler decided, and checks: want ""
// — not scheduled, no device its claim may get; "team-b or shared" — a
// device of team-b's or a shared one; else a device of that network. It
// returns the claim's last selector.
func claimTakes(ctx context.Context, t *testing.T, c *cluster.Cluster, node, ns, name string, selectors []string,
	template bool, want string) string {
	t.Helper()
	admin := c.Client
	claims := admin.ResourceV1().ResourceClaims(ns)
	rc := corev1.PodResourceClaim{Name: "net"}
	if template {
		_, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: deviceClaim(selectors...)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		rc.ResourceClaimTemplateName = ptr.To(name)
	} else {
		_, err := claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: deviceClaim(selectors...)}, metav1.CreateOptions{})
		require.NoError(t, err)
		rc.ResourceClaimName = ptr.To(name)
	}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, claimPod(ns, name, node, rc), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	var why string
	require.Eventually(t, func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				why = cond.Reason + ": " + cond.Message
				return cond.Status == corev1.ConditionTrue || cond.Reason == corev1.PodReasonUnschedulable
			}
		}
		return false
	}, waitFor, 200*time.Millisecond)
	p, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	if want == "" {
		t.Logf("pod %s/%s: %s", ns, pod.Name, why)
		assert.Empty(t, p.Spec.NodeName, "not scheduled: no device its claim may get")
		assert.Contains(t, why, "cannot allocate all claims")
		return ""
	}
	assert.Equal(t, node, p.Spec.NodeName)
	claimName := name
	if template {
		require.Len(t, p.Status.ResourceClaimStatuses, 1)
		claimName = *p.Status.ResourceClaimStatuses[0].ResourceClaimName
	}
	claim, err := claims.Get(ctx, claimName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, claim.Status.Allocation)
	devs, err := nodeDevices(ctx, admin, node)
	require.NoError(t, err)
	for _, r := range claim.Status.Allocation.Devices.Results {
		for network, d := range devs {
			if d.Name != r.Device {
				continue
			}
			t.Logf("pod %s/%s scheduled, its claim allocated %s (%s)", ns, pod.Name, r.Device, network)
			if want == "team-b or shared" {
				dns := *d.Attributes[dra.AttrNamespace].StringValue
				assert.True(t, dns == "team-b" || *d.Attributes[dra.AttrShared].BoolValue, "a device of team-b or a shared one, not %s's", dns)
			} else {
				assert.Equal(t, want, network)
			}
		}
	}
	sel := claim.Spec.Devices.Requests[0].Exactly.Selectors
	if len(sel) == 0 {
		return ""
	}
	return sel[len(sel)-1].CEL.Expression
}

// TestHelmDRAClaimPolicy: the chart renders deploy/base's claim policy
// with the DRA driver on, where the cluster serves MutatingAdmissionPolicy.
func TestHelmDRAClaimPolicy(t *testing.T) {
	h := newHelm(t)
	ctx := context.Background()
	base, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	require.Contains(t, base.Kustomization.Resources, "dra-claim-policy.yaml")
	require.Equal(t, "nri-cni-dra-claim-namespaces", base.ClaimNamespacePolicy.Name, "deploy/base ships it")
	o := h.template(ctx, t, "kube-system")
	assert.Equal(t, base.ClaimNamespacePolicy.Name, o.ClaimNamespacePolicy.Name)
	assert.Equal(t, base.ClaimNamespacePolicy.Spec, o.ClaimNamespacePolicy.Spec, "the chart's is deploy/base's")
	assert.Equal(t, base.ClaimNamespacePolicyBinding.Spec, o.ClaimNamespacePolicyBinding.Spec)
	off := h.template(ctx, t, "kube-system", "--set", "kubernetes.dra.enabled=false")
	assert.Empty(t, off.ClaimNamespacePolicy.Name, "not without the DRA driver")
	old := h.templateWith(ctx, t, "kube-system")
	assert.Empty(t, old.ClaimNamespacePolicy.Name, "not where MutatingAdmissionPolicy is not served")
	beta := h.templateWith(ctx, t, "kube-system", "--api-versions", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy")
	assert.Equal(t, "admissionregistration.k8s.io/v1beta1", beta.ClaimNamespacePolicy.APIVersion, "1.34 and 1.35 with the gate")
}
