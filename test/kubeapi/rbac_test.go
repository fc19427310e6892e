package kubeapi

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/test/cluster"
)

// nadConfig passes deploy/base's NAD policy (and its admission policy).
const nadConfig = `{"cniVersion":"1.0.0","name":"kubeapi-net","type":"bridge","bridge":"nad-kubeapi0"}`

// checkRBAC: NADs readable, Events writable, nothing else.
func checkRBAC(ctx context.Context, t *testing.T, id identity, f *fixture, admin *nadclient.Clientset) {
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: "net", Namespace: f.ns},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: nadConfig}}
	_, err := admin.K8sCniCncfIoV1().NetworkAttachmentDefinitions(f.ns).Create(ctx, nad, metav1.CreateOptions{})
	require.NoError(t, err, "the CRD serves the NPWG client's resource")
	as, err := nadclient.NewForConfig(f.asCfg)
	require.NoError(t, err)

	list, err := as.K8sCniCncfIoV1().NetworkAttachmentDefinitions("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "list NADs in every namespace")
	assert.Len(t, list.Items, 1)
	_, err = as.K8sCniCncfIoV1().NetworkAttachmentDefinitions(f.ns).Get(ctx, "net", metav1.GetOptions{})
	assert.NoError(t, err, "get a NAD")

	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubeapi-", Namespace: f.ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: f.ns, Name: f.here.Name, UID: f.here.UID},
		Reason:         "Test", Message: "an Event by nri-cni", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "nri-cni"}}
	created, err := f.as.CoreV1().Events(f.ns).Create(ctx, ev, metav1.CreateOptions{})
	require.NoError(t, err, "create an Event")
	_, err = f.as.CoreV1().Events(f.ns).Patch(ctx, created.Name, types.MergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
	assert.NoError(t, err, "patch an Event (the recorder's aggregation)")

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"get secrets", func() error {
			_, err := f.as.CoreV1().Secrets(id.Namespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"get a pod", func() error {
			_, err := f.as.CoreV1().Pods(f.ns).Get(ctx, f.here.Name, metav1.GetOptions{})
			return err
		}},
		{"delete a pod", func() error { return f.as.CoreV1().Pods(f.ns).Delete(ctx, f.here.Name, metav1.DeleteOptions{}) }},
		{"patch pods/status", func() error {
			_, err := f.as.CoreV1().Pods(f.ns).Patch(ctx, f.here.Name, types.MergePatchType,
				[]byte(`{"status":{"message":"x"}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"create a NAD", func() error {
			n := nad.DeepCopy()
			n.Name, n.ResourceVersion = "other", ""
			_, err := as.K8sCniCncfIoV1().NetworkAttachmentDefinitions(f.ns).Create(ctx, n, metav1.CreateOptions{})
			return err
		}},
		{"patch a node", func() error {
			_, err := f.as.CoreV1().Nodes().Patch(ctx, f.otherNode, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
	} {
		err := tc.call()
		require.Error(t, err, tc.name)
		t.Logf("%s: %v", tc.name, err)
		assert.True(t, apierrors.IsForbidden(err), "%s: forbidden: %v", tc.name, err)
		assert.Contains(t, err.Error(), `User "`+id.username()+`" cannot`)
	}
}

// checkDaemonCode runs kube/'s NAD source and status writer as nri-cni's
// identity: the informer syncs, network-status is written, a Warning Event
// appears.
func checkDaemonCode(ctx context.Context, t *testing.T, c *cluster.Cluster, f *fixture) {
	m, _, stop := startKube(ctx, t, c, f, kube.Options{Status: kube.StatusOptions{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}})
	defer stop()
	n, err := m.Source.Network(plan.NADRef{Namespace: f.ns, Name: "net"})
	require.NoError(t, err)
	assert.Equal(t, "kubeapi-net", n.Name)

	pn := attach.PodNetworks{Namespace: f.ns, Name: f.here.Name, UID: string(f.here.UID), Networks: []attach.NetworkStatus{
		{Name: "default", Interface: "eth0", IPs: []string{"10.0.0.9"}, Default: true},
		{Name: f.ns + "/net", Interface: "net1", IPs: []string{"10.250.0.2"}, Mac: "02:00:00:00:00:02"},
	}}
	want, err := kube.NetworkStatusJSON(pn)
	require.NoError(t, err)
	m.Status.PodNetworks(pn)
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods(f.ns).Get(ctx, f.here.Name, metav1.GetOptions{})
		return err == nil && p.Annotations[kube.AnnotationNetworkStatus] == want
	}, waitFor, 100*time.Millisecond, "kube.StatusWriter's patch never landed")

	m.Status.AttachFailed(attach.AttachFailure{Namespace: f.ns, Name: f.here.Name, UID: string(f.here.UID),
		Network: f.ns + "/net", Err: errors.New("plugin type=\"bridge\" failed (add): test")})
	require.Eventually(t, func() bool {
		evs, err := c.Client.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == kube.ReasonAttachFailed && e.InvolvedObject.Name == f.here.Name {
				assert.Equal(t, corev1.EventTypeWarning, e.Type)
				assert.Equal(t, c.NodeName, e.Source.Host)
				return true
			}
		}
		return false
	}, waitFor, 100*time.Millisecond, "kube's Warning Event never appeared")
}

// startKube starts kube/'s Kubernetes mode as nri-cni's identity (o with
// deploy/base's NAD policy) until stop, and waits for its NAD cache; its
// log is in the buffer, and in t's log at stop.
func startKube(ctx context.Context, t *testing.T, c *cluster.Cluster, f *fixture, o kube.Options) (m *kube.Mode, log *syncBuffer, stop func()) {
	t.Helper()
	nadAs, err := nadclient.NewForConfig(f.asCfg)
	require.NoError(t, err)
	l := logrus.New()
	log = &syncBuffer{}
	l.SetOutput(log)
	l.SetLevel(logrus.DebugLevel)
	runCtx, cancel := context.WithCancel(ctx)
	stop = func() { cancel(); t.Logf("kube/ log:\n%s", log.String()) }
	o.NADPolicy = shippedNADPolicy(t)
	m = kube.Start(runCtx, &kube.Clients{Core: f.as, NAD: nadAs, NodeName: c.NodeName}, logrus.NewEntry(l), o)
	syncCtx, syncCancel := context.WithTimeout(ctx, waitFor)
	defer syncCancel()
	if err := m.Source.WaitForSync(syncCtx); err != nil {
		stop()
		require.NoError(t, err, "the NAD informer syncs with list+watch")
	}
	return m, log, stop
}

// syncBuffer collects the log of goroutines that may outlive the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
