package kubeapi

// Issue 28, items 8 and 9, on a real cluster (API server, scheduler,
// kubelet): deploy/base's DeviceClass admission policy, and a prepared-claim
// record lost after the real kubelet prepared the claim; issue 41, item 7:
// the kubelet's checkpoint unreadable (dra_checkpoint_test.go).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdra"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestDRAGates(t *testing.T) {
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

	t.Run("ClassPolicy", func(t *testing.T) { checkClassPolicy(ctx, t, c) })
	t.Run("LostClaimRecord", func(t *testing.T) { checkLostClaimRecord(ctx, t, c) })
	t.Run("UnreadableCheckpoint", func(t *testing.T) { checkUnreadableCheckpoint(ctx, t, c) })
}

// classRequest is a request of class (or, with sub, a firstAvailable
// request whose subrequests are of those classes).
func classRequest(name string, classes ...string) resourcev1.DeviceRequest {
	if len(classes) == 1 {
		return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: classes[0]}}
	}
	r := resourcev1.DeviceRequest{Name: name}
	for i, c := range classes {
		r.FirstAvailable = append(r.FirstAvailable, resourcev1.DeviceSubRequest{Name: fmt.Sprintf("s%d", i), DeviceClassName: c})
	}
	return r
}

// checkClassPolicy: with no lists in its ConfigMap the policy lets every
// claim through (the base class too: bypass (a) of item 8 as shipped
// before); with the lists, a tenant's claim or template through the base
// class nri-cni.io is refused with the reason, the admin's pinned class and
// other drivers' classes are not, and a listed namespace gets its own list.
func checkClassPolicy(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	files := []string{filepath.Join(b.Dir, "deviceclass.yaml"), filepath.Join(b.Dir, "dra-class-policy.yaml")}
	for _, f := range files {
		_, err := c.Kubectl(ctx, "apply", "-f", f)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, f := range files {
			_, err := c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", f)
			assert.NoError(t, err)
		}
	})
	waitTypeChecked(ctx, t, c, b.ClassPolicy.Name)
	for _, name := range []string{"team-net", "gpu.example.com"} {
		_, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: "device.driver == " + map[string]string{"team-net": `"nri-cni.io"`, "gpu.example.com": `"gpu.example.com"`}[name]}}}}},
			metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = c.Client.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	tenant, admins, locked := harness.RandomName("tenant-"), harness.RandomName("net-admins-"), harness.RandomName("locked-")
	for _, ns := range []string{tenant, admins, locked} {
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	create := func(ns string, template bool, reqs ...resourcev1.DeviceRequest) error {
		spec := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}}
		meta := metav1.ObjectMeta{Name: harness.RandomName("c-"), Namespace: ns}
		if template {
			_, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{ObjectMeta: meta,
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec}}, dryRun)
			return err
		}
		_, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: meta, Spec: spec}, dryRun)
		return err
	}
	require.NoError(t, create(tenant, false, classRequest("net", dra.DriverName)), "no lists: no rule")
	require.NoError(t, create(tenant, true, classRequest("net", dra.DriverName)), "no lists: no rule")

	params := b.ClassParams.DeepCopy()
	params.Data = map[string]string{"default": "team-net", "namespaces." + admins: "nri-cni.io, team-net", "namespaces." + locked: ""}
	_, err = c.Client.CoreV1().ConfigMaps(params.Namespace).Update(ctx, params, metav1.UpdateOptions{})
	require.NoError(t, err)
	applied := time.Now()
	require.Eventually(t, func() bool { return create(tenant, false, classRequest("net", dra.DriverName)) != nil },
		waitFor, 100*time.Millisecond, "the class policy never refused the base class")
	t.Logf("class policy in effect %s after its ConfigMap was written", time.Since(applied).Round(time.Millisecond))

	where := "(ConfigMap " + params.Namespace + "/" + params.Name + ", key "
	for _, tc := range []struct {
		name     string
		ns       string
		template bool
		reqs     []resourcev1.DeviceRequest
		want     string // "" = admitted
	}{
		{name: "tenant claim, base class", ns: tenant, reqs: []resourcev1.DeviceRequest{classRequest("net", dra.DriverName)},
			want: "nri-cni: request net (DeviceClass nri-cni.io): namespace " + tenant +
				" may get nri-cni.io devices only through the DeviceClasses team-net " + where + "default)"},
		{name: "tenant template, base class", ns: tenant, template: true, reqs: []resourcev1.DeviceRequest{classRequest("net", dra.DriverName)},
			want: "request net (DeviceClass nri-cni.io)"},
		{name: "tenant, pinned class", ns: tenant, reqs: []resourcev1.DeviceRequest{classRequest("net", "team-net")}},
		{name: "tenant template, pinned class", ns: tenant, template: true, reqs: []resourcev1.DeviceRequest{classRequest("net", "team-net")}},
		{name: "tenant, another driver's class", ns: tenant, reqs: []resourcev1.DeviceRequest{classRequest("gpu", "gpu.example.com"),
			classRequest("net", "team-net")}},
		{name: "tenant, firstAvailable falling back to the base class", ns: tenant,
			reqs: []resourcev1.DeviceRequest{classRequest("net", "team-net", dra.DriverName)},
			want: "request net/s1 (DeviceClass nri-cni.io)"},
		{name: "tenant, second request", ns: tenant,
			reqs: []resourcev1.DeviceRequest{classRequest("a", "team-net"), classRequest("b", dra.DriverName)},
			want: "request b (DeviceClass nri-cni.io)"},
		{name: "network team, base class", ns: admins, reqs: []resourcev1.DeviceRequest{classRequest("net", dra.DriverName)}},
		{name: "locked namespace", ns: locked, reqs: []resourcev1.DeviceRequest{classRequest("net", "team-net")},
			want: "only through the DeviceClasses (none) " + where + "namespaces." + locked + ")"},
		{name: "locked namespace, another driver", ns: locked, reqs: []resourcev1.DeviceRequest{classRequest("gpu", "gpu.example.com")}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			err := create(tc.ns, tc.template, tc.reqs...)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, apierrors.IsForbidden(err), "403: %v", err)
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy '"+b.ClassPolicy.Name+"'")
			assert.Contains(t, err.Error(), tc.want)
			t.Logf("%v", err)
		})
	}
}

// checkLostClaimRecord: nri-cni's DRA driver, registered with the real
// kubelet, prepares a pod's claim; the kubelet checkpoints it. The record
// is then emptied (a power loss) and nri-cni "restarts": the kubelet's
// checkpoint, read as nri-cni reads it, says the claim is prepared by
// nri-cni.io for that pod, so planning the pod fails closed naming the
// claim; a driver that may not rebuild it (its class is now refused) puts a
// Warning Event on the claim; one that may, rebuilds the record from the
// claim and the pod plans again.
func checkLostClaimRecord(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	_, err = c.Kubectl(ctx, "apply", "-f", filepath.Join(b.Dir, "deviceclass.yaml"))
	require.NoError(t, err)
	checkpoint := dra.CheckpointPath(c.KubeletRootDir)
	held, err := dra.ReadKubeletClaims(checkpoint, dra.DriverName)
	require.NoError(t, err, "the real kubelet's checkpoint, at %s", checkpoint)
	assert.Empty(t, held)

	stateDir := t.TempDir()
	alpha, err := cni.Parse([]byte(`{"cniVersion":"1.0.0","name":"alpha","plugins":[{"type":"bridge","bridge":"nri-cni-t0",` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.252.0.0/24"}]]}}]}`))
	require.NoError(t, err)
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	sink := kube.NewStatusWriter(c.Client, broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nri-cni"}),
		logrus.NewEntry(log), kube.StatusOptions{})
	// start runs a driver over the records in stateDir until its stop:
	// nri-cni, started, and stopped.
	start := func(rule *config.DeviceClassRule) (*dra.Driver, *state.Claims, *plan.Planner, func()) {
		claims, err := state.OpenClaims(stateDir)
		require.NoError(t, err)
		cfg := config.Default()
		cfg.Kubernetes = &config.KubernetesConfig{DRA: &config.DRAConfig{Enabled: true, KubeletDir: c.KubeletRootDir,
			Sharing: config.SharingSlots, Slots: 2, DeviceClasses: rule}}
		dra.CheckRecordsAtStart(claims, checkpoint, logrus.NewEntry(log))
		planner := plan.New(cfg, plan.Catalogue{Local: func() []*cni.Network { return []*cni.Network{alpha} }})
		dctx, stop := context.WithCancel(ctx)
		d := dra.New(dra.Options{NodeName: c.NodeName, Client: c.Client, Config: cfg.Kubernetes.DRA, Claims: claims,
			Planner: planner, Sink: sink, Limits: cfg.Limits, Log: logrus.NewEntry(log),
			Candidates: func() []dra.Candidate { return []dra.Candidate{{Network: "alpha", Net: alpha, Local: true}} },
			Checker: dra.Checker{FindPlugin: func(string) error { return nil }, LinkExists: func(string) error { return nil },
				NotReady: func(dra.Candidate) error { return nil }}})
		require.NoError(t, d.Start(dctx))
		go d.KeepRecords(dctx, checkpoint, 500*time.Millisecond)
		return d, claims, planner, func() {
			stop()
			time.Sleep(time.Second) // the helper's sockets go
		}
	}
	_, claims, _, stop := start(nil)

	ns := harness.RandomName("lost-")
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx,
		k8sdra.ClaimTemplate(ns, "net", nil, k8sdra.NetRequest{Name: "net", Network: "alpha", Config: `"interface":"data0"`}),
		metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, templatePod(ns, "app", "net"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		held, err = dra.ReadKubeletClaims(checkpoint, dra.DriverName)
		return err == nil && len(held) == 1
	}, 2*time.Minute, 200*time.Millisecond, "the kubelet never checkpointed the claim as prepared by nri-cni.io")
	h := held[0]
	t.Logf("the kubelet holds %s/%s (uid %s) for pods %v, devices %+v", h.Namespace, h.Name, h.UID, h.Pods, h.Devices)
	assert.Equal(t, ns, h.Namespace)
	assert.Equal(t, []string{string(pod.UID)}, h.Pods)
	_, ok := claims.Get(h.UID)
	require.True(t, ok, "nri-cni recorded it at prepare")
	planPod := func(p *plan.Planner, claims *state.Claims) error {
		_, err := p.Plan(ctx, plan.Pod{Namespace: ns, Claims: claims.ForPod(string(pod.UID))})
		return err
	}

	// A power loss empties the record; nri-cni restarts with a rule that
	// now refuses the claim's class, so it cannot rebuild it.
	stop()
	require.NoError(t, os.WriteFile(filepath.Join(stateDir, "claims", h.UID+".json"), nil, 0o600))
	_, claims, planner, stop := start(&config.DeviceClassRule{Default: []string{"team-net"}})
	require.Len(t, claims.LoadErrors(), 1)
	err = planPod(planner, claims)
	require.ErrorIs(t, err, plan.ErrClaimRecordMissing)
	assert.Contains(t, err.Error(), "ResourceClaim "+ns+"/"+h.Name)
	t.Logf("planning the pod: %v", err)
	var event string
	require.Eventually(t, func() bool {
		l, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ResourceClaim,reason=" +
			kube.ReasonClaimRecordMissing})
		if err != nil || len(l.Items) == 0 {
			return false
		}
		event = l.Items[0].Type + " " + l.Items[0].InvolvedObject.Name + ": " + l.Items[0].Message
		return true
	}, waitFor, 200*time.Millisecond, "no ClaimRecordMissing Event on the claim")
	t.Logf("Event: %s", event)
	assert.Contains(t, event, "Warning "+h.Name+": nri-cni: nri-cni has no record of preparing this claim on node "+c.NodeName)
	assert.Contains(t, event, `DeviceClass "nri-cni.io" is not one namespace `+ns+" may use")

	// Restarted without that rule: the record is rebuilt from the claim.
	stop()
	_, claims, planner, stop = start(nil)
	defer stop()
	require.Eventually(t, func() bool { _, ok := claims.Get(h.UID); return ok }, waitFor, 100*time.Millisecond,
		"the record was never rebuilt")
	assert.Empty(t, claims.Missing())
	require.NoError(t, planPod(planner, claims))
	pc, _ := claims.Get(h.UID)
	require.Len(t, pc.Devices, 1)
	assert.Equal(t, "alpha", pc.Devices[0].Network)
	require.Len(t, pc.Devices[0].Configs, 1, "the claim's NetworkConfig, read back from the claim")

	// The pod goes; the kubelet unprepares the claim through the driver.
	require.NoError(t, c.Client.CoreV1().Pods(ns).Delete(ctx, "app", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, ok := claims.Get(h.UID); return !ok }, 2*time.Minute, 200*time.Millisecond,
		"the kubelet never unprepared the claim")
}
