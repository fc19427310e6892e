package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetLevel(logrus.PanicLevel)
	return logrus.NewEntry(l)
}

func testPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-web",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"keep": "me"}}}
}

func sample() attach.PodNetworks {
	return attach.PodNetworks{Namespace: "ns1", Name: "web", UID: "uid-web", SandboxID: "sb1", Networks: []attach.NetworkStatus{
		{Name: "kindnet", Interface: "eth0", IPs: []string{"10.244.0.7"}, Default: true},
		{Name: "ns1/macvlan", Interface: "net1", IPs: []string{"10.1.0.5", "fd00::5"}, Mac: "02:00:00:00:00:05", MTU: 9000,
			DNS: &state.DNS{Nameservers: []string{"10.1.0.1"}, Search: []string{"corp"}}, Gateway: []string{"fd00::1"}},
		{Name: "secondary", Interface: "net2"},
		{Name: "ns1/uplink", Interface: "net3", IPs: []string{"10.2.0.5"}, Gateway: []string{"10.2.0.1"}, Gateways: []string{"10.2.0.1"}},
	}}
}

const sampleJSON = `[
 {"name":"kindnet","interface":"eth0","ips":["10.244.0.7"],"default":true},
 {"name":"ns1/macvlan","interface":"net1","ips":["10.1.0.5","fd00::5"],"mac":"02:00:00:00:00:05","mtu":9000,"default":false,
  "dns":{"nameservers":["10.1.0.1"],"search":["corp"]},"gateway":["fd00::1"]},
 {"name":"secondary","interface":"net2","default":false},
 {"name":"ns1/uplink","interface":"net3","ips":["10.2.0.5"],"default":false,"gateway":["10.2.0.1"],"default-route":["10.2.0.1"]}
]`

// patches records the pod patches a fake clientset sees; fail decides a
// patch's fate before the tracker applies it (nil = apply).
type patches struct {
	mu   sync.Mutex
	seen [][]byte
	fail func(n int, patch []byte) error
}

func (p *patches) install(c *fake.Clientset) {
	c.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patch := a.(k8stesting.PatchAction).GetPatch()
		p.mu.Lock()
		p.seen = append(p.seen, patch)
		n := len(p.seen)
		p.mu.Unlock()
		if p.fail != nil {
			if err := p.fail(n, patch); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
}

func (p *patches) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen)
}

func runWriter(t *testing.T, c *fake.Clientset, rec record.EventRecorder) *StatusWriter {
	t.Helper()
	w := NewStatusWriter(c, rec, quietLog(), StatusOptions{BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, 2) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func annotation(t *testing.T, c *fake.Clientset) (map[string]string, map[string]string) {
	t.Helper()
	p, err := c.CoreV1().Pods("ns1").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	return p.Annotations, p.Labels
}

func TestNetworkStatusJSONIsNPWG(t *testing.T) {
	got, err := NetworkStatusJSON(sample())
	require.NoError(t, err)
	assert.JSONEq(t, sampleJSON, got)
}

// TestNetworkStatusReadByTheNADClient: a consumer reading network-status
// with the NPWG client library's types (v1.7.7 GetNetworkStatus) sees the
// MTU and the default routes' gateways, as Multus's would show them.
func TestNetworkStatusReadByTheNADClient(t *testing.T) {
	value, err := NetworkStatusJSON(sample())
	require.NoError(t, err)
	pod := testPod()
	pod.Annotations[nadv1.NetworkStatusAnnot] = value
	got, err := nadutils.GetNetworkStatus(pod)
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.Equal(t, nadv1.NetworkStatus{Name: "kindnet", Interface: "eth0", IPs: []string{"10.244.0.7"}, Default: true}, got[0])
	assert.Equal(t, nadv1.NetworkStatus{Name: "ns1/macvlan", Interface: "net1", IPs: []string{"10.1.0.5", "fd00::5"},
		Mac: "02:00:00:00:00:05", Mtu: 9000, Gateway: []string{"fd00::1"},
		DNS: nadv1.DNS{Nameservers: []string{"10.1.0.1"}, Search: []string{"corp"}}}, got[1])
	assert.Equal(t, nadv1.NetworkStatus{Name: "ns1/uplink", Interface: "net3", IPs: []string{"10.2.0.5"}, Gateway: []string{"10.2.0.1"}},
		got[3], "nri-cni's default-route reaches the library's readers as gateway")
}

// TestIgnoredIPAMClaimIsAWarningEvent: planning's warnings become Warning
// Events on the pod; the IPAM claim's has a reason of its own.
func TestIgnoredIPAMClaimIsAWarningEvent(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	w := NewStatusWriter(fake.NewClientset(), rec, quietLog(), StatusOptions{})
	var sink attach.StatusSink = w
	ns, ok := sink.(attach.NoteSink)
	require.True(t, ok, "the status writer takes planning's warnings")
	ns.Noted(attach.PodNote{Namespace: "ns1", Name: "virt-launcher-vm1", UID: "uid-1",
		Note: plan.Note{Network: "ns1/blue", IfName: "net1", Key: plan.KeyIPAMClaimReference, Warning: true, Message: "the IPAM claim was not used"}})
	ns.Noted(attach.PodNote{Namespace: "ns1", Name: "web", UID: "uid-web",
		Note: plan.Note{Network: "ns1/blue", IfName: "net1", Key: "other", Warning: true, Message: "something else"}})
	assert.Equal(t, "Warning IPAMClaimNotUsed nri-cni: the IPAM claim was not used", <-rec.Events)
	assert.Equal(t, "Warning NetworkRequestIgnored nri-cni: something else", <-rec.Events)
}

// TestStartedWithoutNetworksIsAWarningEvent: containers found running
// before their pod's networks get a Warning Event naming them and what
// happens now.
func TestStartedWithoutNetworksIsAWarningEvent(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	var sink attach.StatusSink = NewStatusWriter(fake.NewClientset(), rec, quietLog(), StatusOptions{})
	s, ok := sink.(attach.StartedWithoutSink)
	require.True(t, ok, "the status writer reports containers started without networks")
	s.StartedWithoutNetworks(attach.StartedWithout{Namespace: "ns1", Name: "web", UID: "uid-web", Containers: []string{"app", "log"}, Attached: true})
	s.StartedWithoutNetworks(attach.StartedWithout{Namespace: "ns1", Name: "web", UID: "uid-web", Containers: []string{"app"}, Attached: true, Restarting: true})
	s.StartedWithoutNetworks(attach.StartedWithout{Namespace: "ns1", Name: "bad", UID: "uid-bad", Containers: []string{"app"}})
	for _, want := range []string{"containers app, log started before the pod's networks were attached", "restarted (failClosed.restartStarted)",
		"attaching them failed: it runs without them"} {
		ev := <-rec.Events
		assert.Contains(t, ev, "Warning StartedWithoutNetworks nri-cni: ")
		assert.Contains(t, ev, want)
	}
}

func TestStatusPatchTouchesOnlyTheAnnotationAndCarriesTheUID(t *testing.T) {
	c := fake.NewClientset(testPod())
	var p patches
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	w.PodNetworks(sample())

	require.Eventually(t, func() bool { return w.Pending() == 0 && p.count() == 1 }, waitFor, 5*time.Millisecond)
	var patch map[string]any
	require.NoError(t, json.Unmarshal(p.seen[0], &patch))
	meta := patch["metadata"].(map[string]any)
	assert.Len(t, patch, 1, "only metadata")
	assert.Len(t, meta, 2, "only uid and annotations")
	assert.Equal(t, "uid-web", meta["uid"])
	anns := meta["annotations"].(map[string]any)
	assert.Len(t, anns, 1)
	assert.JSONEq(t, sampleJSON, anns[AnnotationNetworkStatus].(string))

	got, labels := annotation(t, c)
	assert.JSONEq(t, sampleJSON, got[AnnotationNetworkStatus])
	assert.Equal(t, "me", got["keep"], "other annotations untouched")
	assert.Equal(t, map[string]string{"app": "web"}, labels)
}

func TestStatusUIDGuardDropsAReplacedPod(t *testing.T) {
	c := fake.NewClientset(testPod())
	// The fake tracker does not enforce metadata.uid as the API server
	// does; emulate the server's answer for a UID mismatch.
	var p patches
	p.fail = func(_ int, patch []byte) error {
		var m struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(patch, &m)
		if m.Metadata.UID != "uid-web" {
			return apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "web", errors.New("Precondition failed: UID in precondition: "+m.Metadata.UID))
		}
		return nil
	}
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	old := sample()
	old.UID = "uid-old"
	w.PodNetworks(old)
	require.Eventually(t, func() bool { return w.Pending() == 0 }, waitFor, 5*time.Millisecond)
	assert.Equal(t, 1, p.count(), "a conflict is not retried")
	got, _ := annotation(t, c)
	assert.NotContains(t, got, AnnotationNetworkStatus)

	// A deleted pod: NotFound, dropped too.
	gone := sample()
	gone.Name = "gone"
	w.PodNetworks(gone)
	require.Eventually(t, func() bool { return w.Pending() == 0 && p.count() == 2 }, waitFor, 5*time.Millisecond)
}

func TestStatusRetriesUntilTheAPIServerAnswers(t *testing.T) {
	c := fake.NewClientset(testPod())
	var p patches
	p.fail = func(n int, _ []byte) error {
		if n <= 3 {
			return apierrors.NewServiceUnavailable("apiserver is down")
		}
		return nil
	}
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	w.PodNetworks(sample())
	require.Eventually(t, func() bool { return w.Pending() == 0 }, waitFor, 5*time.Millisecond)
	assert.Equal(t, 4, p.count())
	got, _ := annotation(t, c)
	assert.JSONEq(t, sampleJSON, got[AnnotationNetworkStatus])
}

func TestStatusLatestWinsPerPod(t *testing.T) {
	c := fake.NewClientset(testPod())
	var p patches
	var block atomic.Bool
	block.Store(true)
	p.fail = func(int, []byte) error {
		if block.Load() {
			return apierrors.NewServiceUnavailable("down")
		}
		return nil
	}
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	first := sample()
	first.Networks = first.Networks[:1]
	w.PodNetworks(first)
	require.Eventually(t, func() bool { return p.count() >= 1 }, waitFor, time.Millisecond)
	w.PodNetworks(sample())
	block.Store(false)
	require.Eventually(t, func() bool { return w.Pending() == 0 }, waitFor, 5*time.Millisecond)
	got, _ := annotation(t, c)
	assert.JSONEq(t, sampleJSON, got[AnnotationNetworkStatus])
}

func TestAttachFailedIsAWarningEvent(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	w := NewStatusWriter(fake.NewClientset(), rec, quietLog(), StatusOptions{})
	w.AttachFailed(attach.AttachFailure{Namespace: "ns1", Name: "web", UID: "uid-web", Network: "ns1/macvlan",
		Err: errors.New(`network "macvlan": plugin type="macvlan" failed (add): no master`)})
	w.AttachFailed(attach.AttachFailure{Namespace: "ns1", Name: "web", UID: "uid-web", Err: plan.ErrSourceNotSynced})
	assert.Equal(t, `Warning NetworkAttachFailed nri-cni: attaching network ns1/macvlan failed: network "macvlan": plugin type="macvlan" failed (add): no master`, <-rec.Events)
	assert.Contains(t, <-rec.Events, "Warning NetworkAttachFailed nri-cni: attaching networks failed: the NetworkAttachmentDefinition cache has not synced")
}

func TestStartWiresSourceStatusAndEvents(t *testing.T) {
	core := fake.NewClientset(testPod())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := Start(ctx, &Clients{Core: core, NAD: newNADFake(t, nad("ns1", "a", conflistA)), NodeName: "node-1"}, quietLog(),
		Options{NADPolicy: testPolicy(t)})
	wctx, wcancel := context.WithTimeout(ctx, waitFor)
	defer wcancel()
	require.NoError(t, m.Source.WaitForSync(wctx))
	_, err := m.Source.Network(plan.NADRef{Namespace: "ns1", Name: "a"})
	require.NoError(t, err)

	var sink attach.StatusSink = m.Status
	sink.PodNetworks(sample())
	sink.AttachFailed(attach.AttachFailure{Namespace: "ns1", Name: "web", UID: "uid-web", Network: "ns1/a", Err: errors.New("boom")})
	require.Eventually(t, func() bool {
		got, _ := annotation(t, core)
		evs, err := core.CoreV1().Events("ns1").List(ctx, metav1.ListOptions{})
		return err == nil && got[AnnotationNetworkStatus] != "" && len(evs.Items) == 1
	}, waitFor, 10*time.Millisecond)
	evs, err := core.CoreV1().Events("ns1").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	ev := evs.Items[0]
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
	assert.Equal(t, ReasonAttachFailed, ev.Reason)
	assert.Equal(t, "web", ev.InvolvedObject.Name)
	assert.Equal(t, "node-1", ev.Source.Host)
	assert.Contains(t, ev.Message, "ns1/a")
}

// mirrorPod is the API's view of a static pod: a mirror pod whose own UID
// differs and whose config.mirror annotation names the static pod's UID.
func mirrorPod(staticUID string) *corev1.Pod {
	p := testPod()
	p.UID = "uid-of-the-mirror"
	p.Annotations[AnnotationMirror] = staticUID
	return p
}

func TestStaticPodStatusGoesToItsMirrorPod(t *testing.T) {
	c := fake.NewClientset(mirrorPod("uid-web"))
	var p patches
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	pn := sample()
	pn.Static = true
	w.PodNetworks(pn)
	require.Eventually(t, func() bool { return w.Pending() == 0 && p.count() == 1 }, waitFor, 5*time.Millisecond)

	var ops []map[string]any
	require.NoError(t, json.Unmarshal(p.seen[0], &ops), "a JSON patch")
	require.Len(t, ops, 2)
	assert.Equal(t, map[string]any{"op": "test", "path": "/metadata/annotations/kubernetes.io~1config.mirror", "value": "uid-web"}, ops[0])
	assert.Equal(t, "add", ops[1]["op"])
	assert.Equal(t, "/metadata/annotations/k8s.v1.cni.cncf.io~1network-status", ops[1]["path"])
	got, labels := annotation(t, c)
	assert.JSONEq(t, sampleJSON, got[AnnotationNetworkStatus])
	assert.Equal(t, "me", got["keep"])
	assert.Equal(t, "uid-web", got[AnnotationMirror])
	assert.Equal(t, map[string]string{"app": "web"}, labels)
}

func TestStaticPodOfAnotherVersionIsNotWritten(t *testing.T) {
	// The mirror names another static pod (its manifest changed): the test
	// operation fails and the status is dropped, not retried.
	c := fake.NewClientset(mirrorPod("uid-newer"))
	// The API server answers a failed test operation with 422 (its JSON
	// patch handler); the fake tracker does not.
	var p patches
	p.fail = func(int, []byte) error {
		return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
			`testing value /metadata/annotations/kubernetes.io~1config.mirror failed: test failed`, 0, false)
	}
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	pn := sample()
	pn.Static = true
	w.PodNetworks(pn)
	require.Eventually(t, func() bool { return w.Pending() == 0 }, waitFor, 5*time.Millisecond)
	assert.Equal(t, 1, p.count(), "not retried")
	got, _ := annotation(t, c)
	assert.NotContains(t, got, AnnotationNetworkStatus)
}

func TestStaticPodWaitsForItsMirror(t *testing.T) {
	// The kubelet creates the mirror pod once it reaches the API server,
	// possibly after the attach: NotFound is retried for a static pod (a
	// pod from the API server that is not found is gone: dropped at once,
	// TestStatusUIDGuardDropsAReplacedPod).
	c := fake.NewClientset()
	var p patches
	p.fail = func(n int, _ []byte) error {
		if n == 3 {
			require.NoError(t, c.Tracker().Add(mirrorPod("uid-web")))
		}
		return nil
	}
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	pn := sample()
	pn.Static = true
	w.PodNetworks(pn)
	require.Eventually(t, func() bool { return w.Pending() == 0 }, waitFor, 5*time.Millisecond)
	assert.Equal(t, 3, p.count(), "two NotFound, then written")
	got, _ := annotation(t, c)
	assert.JSONEq(t, sampleJSON, got[AnnotationNetworkStatus])
}

// A written network-status is confirmed to OnWritten (the Manager records
// it); a failed or dropped one is not. A resync's report of a confirmed
// status writes nothing.
func TestStatusWrittenIsConfirmed(t *testing.T) {
	c := fake.NewClientset(testPod())
	var p patches
	p.install(c)
	w := runWriter(t, c, record.NewFakeRecorder(10))
	var mu sync.Mutex
	var confirmed []attach.PodNetworks
	w.OnWritten(func(pn attach.PodNetworks) {
		mu.Lock()
		defer mu.Unlock()
		confirmed = append(confirmed, pn)
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(confirmed)
	}
	w.PodNetworks(sample())
	require.Eventually(t, func() bool { return w.Pending() == 0 && count() == 1 }, waitFor, 5*time.Millisecond)
	mu.Lock()
	assert.Equal(t, sample().Digest(), confirmed[0].Digest())
	mu.Unlock()

	gone := sample()
	gone.Name = "gone"
	w.PodNetworks(gone)
	require.Eventually(t, func() bool { return w.Pending() == 0 && p.count() == 2 }, waitFor, 5*time.Millisecond)
	assert.Equal(t, 1, count(), "a pod that is gone: nothing written, nothing confirmed")

	again := sample()
	again.Confirmed = true
	w.PodNetworks(again)
	assert.Equal(t, 0, w.Pending(), "nothing queued")
	assert.Equal(t, 2, p.count(), "no patch")
}
