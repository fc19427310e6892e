package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/plan"
)

// AnnotationNetworkStatus is the NPWG network-status annotation.
const AnnotationNetworkStatus = "k8s.v1.cni.cncf.io/network-status"

// Event reasons.
const (
	ReasonCheckFailed  = "NetworkCheckFailed"
	ReasonAttachFailed = "NetworkAttachFailed"
	// ReasonIPAMClaimNotUsed: an NPWG element's ipam-claim-reference was
	// ignored (nri-cni has no IPAMClaims; the spec says to ignore it).
	ReasonIPAMClaimNotUsed = "IPAMClaimNotUsed"
	// ReasonRequestIgnored: any other warning of planning.
	ReasonRequestIgnored = "NetworkRequestIgnored"
	// ReasonStartedWithoutNetworks: containers of the pod ran before its
	// networks were attached (the node does not fail closed).
	ReasonStartedWithoutNetworks = "StartedWithoutNetworks"
	fieldManager                 = "nri-cni"
)

// StatusWriter is attach.StatusSink: it queues each pod's latest network
// status and writes it from its own workers — never inside the runtime's
// request — with a merge patch of the one annotation, guarded by the pod's
// UID, retried with per-pod exponential backoff while the API server fails.
// The status.devices entries of the pod's DRA claims go through the same
// queue (claimstatus.go), one item per claim. Failed attaches become Warning
// Events (the recorder is asynchronous too).
type StatusWriter struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	log      *logrus.Entry
	queue    workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex // guards pending and seq
	pending map[string]pendingStatus
	seq     uint64

	// written, if set, learns each network-status written (OnWritten).
	written atomic.Pointer[func(attach.PodNetworks)]
}

// pendingStatus is the latest status of a pod or a claim not yet written
// (keyed "pod/<uid>" or "claim/<uid>"); seq tells a newer one from the one
// a worker took.
type pendingStatus struct {
	pn    *attach.PodNetworks // a pod's network-status
	claim *claimStatus        // a claim's status.devices entries
	seq   uint64
}

func podKey(uid string) string   { return "pod/" + uid }
func claimKey(uid string) string { return "claim/" + uid }

// StatusOptions tunes a StatusWriter; zero values take the defaults.
type StatusOptions struct {
	// BaseDelay and MaxDelay bound a pod's retry backoff (default 250 ms,
	// 30 s: status catches up soon after the API server returns).
	BaseDelay, MaxDelay time.Duration
}

// NewStatusWriter returns a writer; Run starts its workers.
func NewStatusWriter(client kubernetes.Interface, recorder record.EventRecorder, log *logrus.Entry, o StatusOptions) *StatusWriter {
	if o.BaseDelay <= 0 {
		o.BaseDelay = 250 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 30 * time.Second
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.BaseDelay, o.MaxDelay),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-cni-network-status"})
	return &StatusWriter{client: client, recorder: recorder, log: log, queue: q, pending: map[string]pendingStatus{}}
}

// OnWritten makes f learn each pod's network-status once it is written
// (attach.Manager.StatusWritten records it, so a restart does not write it
// again). f runs on a worker: it may take a while, not forever.
func (w *StatusWriter) OnWritten(f func(attach.PodNetworks)) { w.written.Store(&f) }

// PodNetworks implements attach.StatusSink: it queues the pod's
// network-status (unless it is known written: Confirmed) and its claims'
// status, and returns.
func (w *StatusWriter) PodNetworks(pn attach.PodNetworks) {
	if !pn.ClaimsOnly && !pn.Confirmed {
		w.enqueue(podKey(pn.UID), pendingStatus{pn: &pn})
	}
	for _, cs := range claimStatuses(pn) {
		w.enqueue(claimKey(cs.UID), pendingStatus{claim: cs})
	}
}

// enqueue makes p the latest status of key and queues key.
func (w *StatusWriter) enqueue(key string, p pendingStatus) {
	w.mu.Lock()
	w.seq++
	p.seq = w.seq
	w.pending[key] = p
	w.mu.Unlock()
	w.queue.Add(key)
}

// AttachFailed implements attach.StatusSink: a Warning Event on the pod
// (the recorder queues it; it never blocks).
func (w *StatusWriter) AttachFailed(f attach.AttachFailure) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: f.Namespace, Name: f.Name, UID: types.UID(f.UID)}
	if f.Network != "" {
		w.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonAttachFailed, "nri-cni: attaching network %s failed: %v", f.Network, f.Err)
		return
	}
	w.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonAttachFailed, "nri-cni: attaching networks failed: %v", f.Err)
}

// Noted implements attach.NoteSink: a Warning Event on the pod for what
// planning ignored of its request (the recorder queues it).
func (w *StatusWriter) Noted(n attach.PodNote) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: n.Namespace, Name: n.Name, UID: types.UID(n.UID)}
	reason := ReasonRequestIgnored
	if n.Note.Key == plan.KeyIPAMClaimReference {
		reason = ReasonIPAMClaimNotUsed
	}
	w.recorder.Eventf(ref, corev1.EventTypeWarning, reason, "nri-cni: %s", n.Note.Message)
}

// StartedWithoutNetworks implements attach.StartedWithoutSink: a Warning
// Event on a pod whose containers ran before its networks were attached.
func (w *StatusWriter) StartedWithoutNetworks(s attach.StartedWithout) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: s.Namespace, Name: s.Name, UID: types.UID(s.UID)}
	what := "its networks are attached now"
	switch {
	case !s.Attached:
		what = "and attaching them failed: it runs without them"
	case s.Restarting:
		what = "its networks are attached now and the containers are restarted (failClosed.restartStarted)"
	}
	w.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonStartedWithoutNetworks,
		"nri-cni: containers %s started before the pod's networks were attached (nri-cni was not serving and this node's runtime "+
			"does not refuse them: see nri-cni status and deploy/node); %s", strings.Join(s.Containers, ", "), what)
}

// CheckFailed implements attach.DriftSink: a Warning Event on the pod whose
// attachment failed CNI CHECK.
func (w *StatusWriter) CheckFailed(f attach.AttachFailure) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: f.Namespace, Name: f.Name, UID: types.UID(f.UID)}
	w.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonCheckFailed,
		"nri-cni: network %s failed CNI CHECK (not repaired; recreate the pod to get it back): %v", f.Network, f.Err)
}

// PolicyWarning implements attach.PolicySink: a Warning Event on the pod
// whose MultiNetworkPolicy table drifted or could not be reprogrammed.
func (w *StatusWriter) PolicyWarning(pod attach.PolicyPod, reason string, err error) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	w.recorder.Eventf(ref, corev1.EventTypeWarning, reason, "nri-cni: MultiNetworkPolicy of sandbox %s: %v", pod.SandboxID, err)
}

// PolicyNotes implements attach.PolicySink. Notes about policies become
// Events on the policies in kube/mnp, which sees every render: nothing
// here.
func (w *StatusWriter) PolicyNotes(attach.PolicyPod, []ir.Note) {}

// Pending is the number of pods and claims whose status is not written yet.
func (w *StatusWriter) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// Run writes statuses with workers goroutines until ctx ends.
func (w *StatusWriter) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
}

// next handles one queued pod; false when the queue is shut down.
func (w *StatusWriter) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	w.mu.Lock()
	p, ok := w.pending[key]
	w.mu.Unlock()
	if !ok {
		w.queue.Forget(key)
		return true
	}
	done := func() {
		w.queue.Forget(key)
		w.mu.Lock()
		if cur, ok := w.pending[key]; ok && cur.seq == p.seq {
			delete(w.pending, key)
		}
		w.mu.Unlock()
	}
	if p.claim != nil {
		w.nextClaim(ctx, key, p.claim, done)
		return true
	}
	uid := p.pn.UID
	log := w.log.WithFields(logrus.Fields{"pod": p.pn.Name, "namespace": p.pn.Namespace, "uid": uid})
	err := w.write(ctx, *p.pn)
	switch {
	case p.pn.Static && apierrors.IsNotFound(err) && w.queue.NumRequeues(key) < mirrorRetries:
		// The kubelet creates a static pod's mirror when it can reach the
		// API server, which may be after the attach: wait for it a while.
		log.WithError(err).Debug("network-status of a static pod: no mirror pod yet; retrying")
		w.queue.AddRateLimited(key)
	case err == nil:
		done()
		if f := w.written.Load(); f != nil {
			(*f)(*p.pn)
		}
	case apierrors.IsNotFound(err), apierrors.IsConflict(err), p.pn.Static && apierrors.IsInvalid(err):
		// The pod is gone, or this name is another pod now (the UID guard;
		// for a mirror pod its failed test): its own attach writes its
		// status.
		log.WithError(err).Debug("network-status not written: the pod is gone or replaced")
		done()
	default:
		log.WithError(err).WithField("retries", w.queue.NumRequeues(key)).Warn("writing network-status failed; retrying with backoff")
		w.queue.AddRateLimited(key)
	}
	return true
}

// write patches the pod's network-status annotation, and nothing else, if
// the pod still has pn's UID.
func (w *StatusWriter) write(ctx context.Context, pn attach.PodNetworks) error {
	pt, patch, err := statusPatch(pn)
	if err != nil {
		return err
	}
	_, err = w.client.CoreV1().Pods(pn.Namespace).Patch(ctx, pn.Name, pt, patch,
		metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil {
		return fmt.Errorf("patching pod %s/%s: %w", pn.Namespace, pn.Name, err)
	}
	return nil
}

// networkStatus is an NPWG network-status entry: the keys of the NPWG
// client library's NetworkStatus (v1.7.7), in its order, and the spec's
// "default-route". Not the library's type itself, which leaves "default"
// out when false (the spec requires it), always writes "dns" (nri-cni only
// when the result has one) and has no "default-route".
type networkStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	Mac       string   `json:"mac,omitempty"`
	// Mtu: the interface's MTU from the ADD result (NPWG v1.3, the
	// client library's "mtu").
	Mtu     int  `json:"mtu,omitempty"`
	Default bool `json:"default"`
	DNS     *dns `json:"dns,omitempty"`
	// DeviceInfo: the NPWG device-info of the interface's device (a
	// device plugin resource's), as the client library writes it.
	DeviceInfo json.RawMessage `json:"device-info,omitempty"`
	// Gateway: the gateways of the pod's default routes through this
	// interface, as the client library writes and reads them.
	Gateway []string `json:"gateway,omitempty"`
	// DefaultRoute: the gateways of the default routes nri-cni set through
	// this interface (the NPWG spec's "default-route").
	DefaultRoute []string `json:"default-route,omitempty"`
}

type dns struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// NetworkStatusJSON renders the annotation's value.
func NetworkStatusJSON(pn attach.PodNetworks) (string, error) {
	entries := make([]networkStatus, 0, len(pn.Networks))
	for _, n := range pn.Networks {
		e := networkStatus{Name: n.Name, Interface: n.Interface, IPs: n.IPs, Mac: n.Mac, Mtu: n.MTU, Default: n.Default,
			Gateway: n.Gateway, DefaultRoute: n.Gateways, DeviceInfo: n.DeviceInfo}
		if n.DNS != nil {
			e.DNS = &dns{Nameservers: n.DNS.Nameservers, Domain: n.DNS.Domain, Search: n.DNS.Search, Options: n.DNS.Options}
		}
		entries = append(entries, e)
	}
	data, err := json.MarshalIndent(entries, "", "    ")
	if err != nil {
		return "", fmt.Errorf("network-status of pod %s/%s: %w", pn.Namespace, pn.Name, err)
	}
	return string(data), nil
}

// statusPatch is the patch that writes pn's network-status and nothing
// else, guarded by the pod's identity. For a pod from the API server: a
// merge patch of metadata.uid (a precondition: the API server refuses it
// with a Conflict if the pod by that name has another UID) and the one
// annotation. For a static pod, whose API object is its mirror pod with a
// UID of its own: a JSON patch whose test operation requires the mirror's
// kubernetes.io/config.mirror annotation to name the static pod's UID.
func statusPatch(pn attach.PodNetworks) (types.PatchType, []byte, error) {
	value, err := NetworkStatusJSON(pn)
	if err != nil {
		return "", nil, err
	}
	if pn.Static {
		data, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/annotations/" + jsonPointerEscape(AnnotationMirror), "value": pn.UID},
			{"op": "add", "path": "/metadata/annotations/" + jsonPointerEscape(AnnotationNetworkStatus), "value": value},
		})
		return types.JSONPatchType, data, err
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pn.UID,
		"annotations": map[string]string{AnnotationNetworkStatus: value},
	}})
	return types.MergePatchType, data, err
}

// AnnotationMirror is the annotation by which the kubelet ties a mirror
// pod to its static pod (its value is the static pod's UID).
const AnnotationMirror = "kubernetes.io/config.mirror"

// mirrorRetries bounds the wait for a static pod's mirror: the kubelet
// retries creating it on its periodic pod sync (syncFrequency, 1 min by
// default) after the API server is back. With the writer's backoff (up to
// 30 s apart) 20 tries are about 8 minutes.
const mirrorRetries = 20

func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
