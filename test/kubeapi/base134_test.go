package kubeapi

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
)

// claimSelector is the selector deploy/base's claim policy adds to a claim
// of namespace ns, and deploy/base-1.34-nomap's asks for.
func claimSelector(ns string) string {
	return `device.driver != "nri-cni.io" || ` +
		`(has(device.attributes["nri-cni.io"].shared) && device.attributes["nri-cni.io"].shared) || ` +
		`(has(device.attributes["nri-cni.io"].namespace) && device.attributes["nri-cni.io"].namespace == "` + ns + `")`
}

// TestBase134: deploy/base-1.34 and deploy/base-1.34-nomap against a real
// kube-apiserver v1.34.4 (K8S_APISERVER_VERSION, built alone: no node), as
// the admin of a 1.34 or 1.35 cluster applies them.
//
//   - NoGate: MutatingAdmissionPolicy off, as 1.34 and 1.35 ship.
//     deploy/base-1.34 and the old fallback (deploy/base without the
//     required-plugins policy: the claim policy is one too) fail;
//     deploy/base-1.34-nomap applies, and refuses what the mutating policies
//     would have fixed, with the fix in the message: a pod asking for
//     networks without requiring nri-cni (CREATE, and an UPDATE that gives
//     it networks), a claim or template of class nri-cni.io without the
//     namespace selector. Everything else is admitted.
//   - Gate: --feature-gates=MutatingAdmissionPolicy=true and the v1beta1
//     API: deploy/base-1.34 applies and both mutations happen.
//   - NoMAPOnDefault: deploy/base-1.34-nomap on the default version's API
//     server (v1.37.2) behaves the same (where MutatingAdmissionPolicy is
//     served, an admin may still keep it off).
func TestBase134(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tools, err := cluster.EnsureTools(ctx)
	require.NoError(t, err)
	old, err := cluster.EnsureAPIServer(ctx)
	require.NoError(t, err)
	start := func(t *testing.T, bin, version string, gate bool) *cluster.Cluster {
		t0 := time.Now()
		c, err := cluster.StartAPIOnly(ctx, cluster.APIOnlyOpts{APIServer: bin, Version: version, Tools: tools, MutatingAdmissionPolicy: gate})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close(context.Background())) })
		sv, err := c.Client.Discovery().ServerVersion()
		require.NoError(t, err)
		require.Equal(t, version, sv.GitVersion)
		t.Logf("kube-apiserver %s alone (MutatingAdmissionPolicy gate %v) up in %s", sv.GitVersion, gate,
			time.Since(t0).Round(time.Millisecond))
		return c
	}
	t.Run("NoGate", func(t *testing.T) { checkNoMAP(ctx, t, start(t, old.Bin, old.Version, false), true) })
	t.Run("Gate", func(t *testing.T) { checkBase134Gate(ctx, t, start(t, old.Bin, old.Version, true)) })
	t.Run("NoMAPOnDefault", func(t *testing.T) {
		if tools.Version == old.Version {
			t.Skipf("K8S_VERSION is %s too: NoGate ran there", old.Version)
		}
		checkNoMAP(ctx, t, start(t, filepath.Join(tools.K8sDir, "kube-apiserver"), tools.Version, false), false)
	})
}

// nsWithServiceAccount creates a namespace and its default ServiceAccount
// (no controller-manager makes it here; the ServiceAccount admission plugin
// refuses pods without it).
func nsWithServiceAccount(ctx context.Context, t *testing.T, c *cluster.Cluster, prefix string) string {
	t.Helper()
	ns := harness.RandomName(prefix)
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ensureDefaultSA(ctx, t, c, ns)
	return ns
}

func ensureDefaultSA(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	t.Helper()
	_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// checkBase134Gate: with the feature gate, deploy/base-1.34 applies and its
// two mutating policies do their job.
func checkBase134Gate(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	out, err := c.Kubectl(ctx, "apply", "-k", filepath.Join(deploy.RepoRoot(), "deploy", "base-1.34"))
	require.NoError(t, err)
	assert.Contains(t, out, "mutatingadmissionpolicy.admissionregistration.k8s.io/nri-cni-required-plugins")
	assert.Contains(t, out, "mutatingadmissionpolicy.admissionregistration.k8s.io/nri-cni-dra-claim-namespaces")
	ns := nsWithServiceAccount(ctx, t, c, "gate-")

	var pod *corev1.Pod
	require.Eventually(t, func() bool {
		pod, err = admit(ctx, c, requiredPod(ns, "asks", map[string]string{plan.AnnotationNetworks: "secondary"}), true)
		return err == nil && pod.Annotations[requiredPodKey] != ""
	}, waitFor, 20*time.Millisecond, "the required-plugins policy never mutated a pod: %v", err)
	assert.Equal(t, `["nri-cni"]`, pod.Annotations[requiredPodKey])

	var claim *resourcev1.ResourceClaim
	require.Eventually(t, func() bool {
		claim, err = c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "net"}, Spec: deviceClaim()}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(claim.Spec.Devices.Requests[0].Exactly.Selectors) > 0
	}, waitFor, 20*time.Millisecond, "the claim policy never mutated a claim: %v", err)
	sel := claim.Spec.Devices.Requests[0].Exactly.Selectors
	require.Len(t, sel, 1)
	assert.Equal(t, claimSelector(ns), sel[0].CEL.Expression)
}

// checkNoMAP: deploy/base-1.34-nomap applied to an API server without
// MutatingAdmissionPolicy (oldFallbacksFail: and what fails there without
// it, on 1.34 and 1.35).
func checkNoMAP(ctx context.Context, t *testing.T, c *cluster.Cluster, oldFallbacksFail bool) {
	root := deploy.RepoRoot()
	ns := nsWithServiceAccount(ctx, t, c, "nomap-")
	ensureDefaultSA(ctx, t, c, "kube-system")
	if oldFallbacksFail {
		out, err := c.Kubectl(ctx, "apply", "-k", filepath.Join(root, "deploy", "base-1.34"))
		require.Error(t, err, "deploy/base-1.34 without the feature gate")
		assert.Contains(t, out, `no matches for kind "MutatingAdmissionPolicy" in version "admissionregistration.k8s.io/v1beta1"`)
		// The old docs' fallback: deploy/base without
		// required-plugins-policy.yaml still holds the claim policy.
		out, err = c.Kubectl(ctx, "apply", "--dry-run=server", "-f", filepath.Join(root, "deploy", "base", "dra-claim-policy.yaml"))
		require.Error(t, err)
		assert.Contains(t, out, `no matches for kind "MutatingAdmissionPolicy" in version "admissionregistration.k8s.io/v1"`)
	}
	// A pod from before the policy: asks, requires nothing.
	before, err := admit(ctx, c, requiredPod(ns, "before", map[string]string{plan.AnnotationNetworks: "secondary"}), false)
	require.NoError(t, err)

	out, err := c.Kubectl(ctx, "apply", "-k", filepath.Join(root, deploy.NoMAPDir))
	require.NoError(t, err, "deploy/base-1.34-nomap applies")
	assert.Contains(t, out, "validatingadmissionpolicy.admissionregistration.k8s.io/nri-cni-required-plugins")
	assert.Contains(t, out, "validatingadmissionpolicy.admissionregistration.k8s.io/nri-cni-dra-claim-namespaces")
	assert.NotContains(t, out, "mutatingadmissionpolicy")

	asks := map[string]string{plan.AnnotationNetworks: "secondary"}
	require.Eventually(t, func() bool {
		_, err := admit(ctx, c, requiredPod(ns, "probe", asks), true)
		return apierrors.IsInvalid(err)
	}, waitFor, 20*time.Millisecond, "the required-plugins policy never refused a pod")
	t.Run("PodCreate", func(t *testing.T) { checkNoMAPPods(ctx, t, c, ns) })
	t.Run("PodUpdate", func(t *testing.T) { checkNoMAPUpdates(ctx, t, c, ns, before) })
	t.Run("Claims", func(t *testing.T) { checkNoMAPClaims(ctx, t, c, ns) })
}

// checkNoMAPPods: pod CREATEs (dry-run), refused exactly where deploy/base's
// mutating policy would have added the requirement (or left a pod that asks
// unprotected), with the annotation to add in the message.
func checkNoMAPPods(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	const npwg, own = plan.AnnotationNPWGNetworks, plan.AnnotationNetworks
	nets := func(kv ...string) map[string]string {
		m := map[string]string{own: "secondary"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	long := "[" + strings.Repeat("other, ", 200) + "nri-cni]"
	for _, tc := range []struct {
		name        string
		ns          string
		ann         map[string]string
		labels      map[string]string
		hostNetwork bool
		refused     bool
	}{
		{name: "npwg", ann: map[string]string{npwg: "net-a"}, refused: true},
		{name: "own annotation", ann: nets(), refused: true},
		{name: "no annotations"},
		{name: "blank networks", ann: map[string]string{own: " ", npwg: ""}},
		{name: "hostNetwork", ann: nets(), hostNetwork: true},
		{name: "nri-cni's own pod", ann: nets(), labels: map[string]string{"app.kubernetes.io/name": "nri-cni"}},
		{name: "excluded namespace", ns: "kube-system", ann: nets()},
		{name: "requires nri-cni", ann: nets(requiredPodKey, `["nri-cni"]`)},
		{name: "requires it among others", ann: nets(requiredPodKey, `["other", "nri-cni"]`)},
		{name: "flow list", ann: nets(requiredPodKey, `[other, 'nri-cni']`)},
		{name: "bare key", ann: nets(requiredBareKey, `["nri-cni"]`)},
		{name: "others only", ann: nets(requiredPodKey, `["other"]`), refused: true},
		{name: "empty list", ann: nets(requiredPodKey, `[]`), refused: true},
		{name: "nri-cni2", ann: nets(requiredPodKey, `["nri-cni2"]`), refused: true},
		{name: "block list", ann: nets(requiredPodKey, "- nri-cni\n"), refused: true},
		{name: "pod key wins over bare key", ann: nets(requiredPodKey, `["other"]`, requiredBareKey, `["nri-cni"]`), refused: true},
		{name: "list over 1024 bytes", ann: nets(requiredPodKey, long), refused: true},
		{name: "long networks annotation", ann: map[string]string{npwg: strings.Repeat("net-a,", 35000) + "net-a", requiredPodKey: `["nri-cni"]`}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			p := requiredPod(ns, "pod", tc.ann)
			if tc.ns != "" {
				p.Namespace = tc.ns
			}
			p.Labels, p.Spec.HostNetwork = tc.labels, tc.hostNetwork
			got, err := admit(ctx, c, p, true)
			if !tc.refused {
				require.NoError(t, err)
				assert.Equal(t, tc.ann, mapOrNil(got.Annotations), "a validating policy changes nothing")
				return
			}
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			msg := err.Error()
			assert.Contains(t, msg, "ValidatingAdmissionPolicy 'nri-cni-required-plugins'")
			assert.Contains(t, msg, `Add the annotation required-plugins.noderesource.dev/pod: '["nri-cni"]'`)
			if _, ok := tc.ann[npwg]; ok {
				assert.Contains(t, msg, "asks for networks ("+npwg+")")
			} else {
				assert.Contains(t, msg, "asks for networks ("+own+")")
			}
			_, had := tc.ann[requiredPodKey]
			assert.Equal(t, had, strings.Contains(msg, "keep the plugins it names now"), msg)
			if tc.name == "own annotation" {
				t.Logf("refused: %s", msg)
			}
		})
	}
}

// mapOrNil is m, nil when empty (the API server returns no map for none).
func mapOrNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// checkNoMAPUpdates: an UPDATE is judged when it changes a networks
// annotation or the required-plugins keys: a pod that gets networks later
// must require nri-cni; other updates pass, also of a pod created before
// the policy.
func checkNoMAPUpdates(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, before *corev1.Pod) {
	pods := c.Client.CoreV1().Pods(ns)
	update := func(name string, change func(*corev1.Pod)) error {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		change(p)
		_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
		return err
	}
	refused := func(err error) {
		t.Helper()
		require.Error(t, err)
		assert.True(t, apierrors.IsInvalid(err), "%v", err)
		assert.Contains(t, err.Error(), `Add the annotation required-plugins.noderesource.dev/pod: '["nri-cni"]'`)
	}

	// Hot-plug: networks added later.
	later, err := admit(ctx, c, requiredPod(ns, "later", map[string]string{"keep": "1"}), false)
	require.NoError(t, err)
	refused(update(later.Name, func(p *corev1.Pod) { p.Annotations[plan.AnnotationNPWGNetworks] = "net-a" }))
	require.NoError(t, update(later.Name, func(p *corev1.Pod) {
		p.Annotations[plan.AnnotationNPWGNetworks], p.Annotations[requiredPodKey] = "net-a", `["nri-cni"]`
	}), "networks added with the requirement")
	refused(update(later.Name, func(p *corev1.Pod) { delete(p.Annotations, requiredPodKey) }))
	refused(update(later.Name, func(p *corev1.Pod) { p.Annotations[requiredPodKey] = `["other"]` }))
	require.NoError(t, update(later.Name, func(p *corev1.Pod) { p.Labels["tier"] = "web" }), "an unrelated update")
	require.NoError(t, update(later.Name, func(p *corev1.Pod) { p.Annotations[plan.AnnotationNPWGNetworks] = "net-a, net-b" }),
		"networks changed on a pod that requires nri-cni")

	// A pod created before the policy, asking without the requirement:
	// updates that leave its networks alone pass (nri-cni's own
	// network-status patch among them), a change of its networks does not.
	require.NoError(t, update(before.Name, func(p *corev1.Pod) { p.Labels["tier"] = "web" }))
	require.NoError(t, update(before.Name, func(p *corev1.Pod) { p.Annotations["k8s.v1.cni.cncf.io/network-status"] = "[]" }))
	refused(update(before.Name, func(p *corev1.Pod) { p.Annotations[plan.AnnotationNetworks] = "secondary, other" }))
	require.NoError(t, update(before.Name, func(p *corev1.Pod) { p.Annotations[requiredPodKey] = `["nri-cni"]` }),
		"the requirement added")
	for _, name := range []string{later.Name, before.Name} {
		assert.NoError(t, pods.Delete(ctx, name, metav1.DeleteOptions{}))
	}
}

// checkNoMAPClaims: claims and templates (dry-run) of class nri-cni.io need
// the selector of their namespace, which the message gives; other classes
// pass.
func checkNoMAPClaims(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string) {
	own, other := claimSelector(ns), claimSelector("team-a")
	sub := func(name, class string, selectors ...string) resourcev1.DeviceSubRequest {
		s := resourcev1.DeviceSubRequest{Name: name, DeviceClassName: class}
		for _, e := range selectors {
			s.Selectors = append(s.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
		}
		return s
	}
	firstAvailable := func(subs ...resourcev1.DeviceSubRequest) resourcev1.ResourceClaimSpec {
		return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "net", FirstAvailable: subs}}}}
	}
	otherClass := deviceClaim()
	otherClass.Devices.Requests[0].Exactly.DeviceClassName = "gpu.example.com"
	twoRequests := deviceClaim(own)
	second := deviceClaim()
	second.Devices.Requests[0].Name = "data"
	twoRequests.Devices.Requests = append(twoRequests.Devices.Requests, second.Devices.Requests[0])
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for _, tc := range []struct {
		name    string
		ns      string
		spec    resourcev1.ResourceClaimSpec
		refused string // what the message names; "" = admitted
	}{
		{name: "no selector", spec: deviceClaim(), refused: "request net (DeviceClass nri-cni.io)"},
		{name: "the selector", spec: deviceClaim(own)},
		{name: "the selector among others", spec: deviceClaim(own, networkIs("storage"))},
		{name: "another namespace's selector", spec: deviceClaim(other), refused: "request net (DeviceClass nri-cni.io)"},
		{name: "a second request without it", spec: twoRequests, refused: "request data (DeviceClass nri-cni.io)"},
		{name: "another class", spec: otherClass},
		{name: "firstAvailable falling back to nri-cni.io", spec: firstAvailable(sub("gpu", "gpu.example.com"), sub("nri", "nri-cni.io")),
			refused: "request net/nri (DeviceClass nri-cni.io)"},
		{name: "firstAvailable with the selector", spec: firstAvailable(sub("gpu", "gpu.example.com"), sub("nri", "nri-cni.io", own))},
		{name: "kube-system too", ns: "kube-system", spec: deviceClaim(), refused: "request net (DeviceClass nri-cni.io)"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			cns := ns
			if tc.ns != "" {
				cns = tc.ns
			}
			claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "net"}, Spec: tc.spec}
			_, err := c.Client.ResourceV1().ResourceClaims(cns).Create(ctx, claim, dry)
			tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "net"},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: tc.spec}}
			_, terr := c.Client.ResourceV1().ResourceClaimTemplates(cns).Create(ctx, tmpl, dry)
			for what, err := range map[string]error{"claim": err, "template": terr} {
				if tc.refused == "" {
					assert.NoError(t, err, what)
					continue
				}
				require.Error(t, err, what)
				assert.True(t, apierrors.IsInvalid(err), "%s: %v", what, err)
				msg := err.Error()
				assert.Contains(t, msg, "ValidatingAdmissionPolicy 'nri-cni-dra-claim-namespaces'", what)
				assert.Contains(t, msg, "nri-cni: "+tc.refused, what)
				assert.Contains(t, msg, "- cel: {expression: '"+claimSelector(cns)+"'}", "%s: the selector to add", what)
				if tc.name == "no selector" && what == "claim" {
					t.Logf("refused: %s", msg)
				}
			}
		})
	}
}
