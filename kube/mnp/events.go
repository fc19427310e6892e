package mnp

// What operators hear: Warning Events on a policy with an invalid part or
// past a cap (MultiNetworkPolicyInvalid), once per policy generation and
// reason, and on a pod that got the deny-all table because the caches had
// not synced (MultiNetworkPolicyNotSynced), once per pod. Every node sees
// the same policies, so every node would tell: each tells at most
// eventBurst Events at once, then one per eventEvery (the DRA driver's
// pattern, kube/drareport.go); the others are dropped and counted.

import (
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	v1beta1 "github.com/nri-cni/nri-cni/apis/multinetpol/v1beta1"
	"github.com/nri-cni/nri-cni/netpol"
)

// Event reasons.
const (
	ReasonInvalid   = "MultiNetworkPolicyInvalid"
	ReasonNotSynced = "MultiNetworkPolicyNotSynced"
)

// Bounds of the Events one node raises.
const (
	eventBurst = 10
	eventEvery = 30 * time.Second
)

// Observer is the metrics side (metrics.Metrics).
type Observer interface {
	// ObserveMNPPropagation: from a change marking a sandbox dirty to its
	// rules applied.
	ObserveMNPPropagation(d time.Duration)
	// SetMNPQueueDepth: sandboxes waiting in the dirty queue.
	SetMNPQueueDepth(n int)
	// SetMNPInvalidPolicies: policies with an invalid part or past a cap,
	// at their current generation.
	SetMNPInvalidPolicies(n int)
	// MNPEventDropped counts an Event the rate limit dropped.
	MNPEventDropped()
}

// reporter raises the Events and keeps the invalid-policy gauge.
type reporter struct {
	node     string
	recorder record.EventRecorder // nil: no Events
	observer Observer             // nil: no metrics
	now      func() time.Time

	mu      sync.Mutex
	tokens  float64
	at      time.Time
	told    map[string]bool  // "ns/name/generation/reason" told
	invalid map[string]int64 // "ns/name" → generation noted invalid
	podTold map[string]bool  // pod UIDs told NotSynced
}

func newReporter(node string, recorder record.EventRecorder, observer Observer) *reporter {
	return &reporter{node: node, recorder: recorder, observer: observer, now: time.Now, tokens: eventBurst,
		told: map[string]bool{}, invalid: map[string]int64{}, podTold: map[string]bool{}}
}

// take spends a token if there is one (with r.mu held).
func (r *reporter) take() bool {
	now := r.now()
	r.tokens = min(eventBurst, r.tokens+float64(now.Sub(r.at))/float64(eventEvery))
	r.at = now
	if r.tokens < 1 {
		if r.observer != nil {
			r.observer.MNPEventDropped()
		}
		return false
	}
	r.tokens--
	return true
}

// noted tells the notes about policy p (invalid parts, caps hit).
func (r *reporter) noted(p *netpol.Policy, notes []netpol.Note) {
	if p == nil || len(notes) == 0 {
		return
	}
	key := p.Namespace + "/" + p.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	r.invalid[key] = p.Generation
	r.gauge()
	if r.recorder == nil {
		return
	}
	for _, n := range notes {
		said := key + "/" + itoa(p.Generation) + "/" + n.Reason
		if r.told[said] || !r.take() {
			continue
		}
		r.told[said] = true
		ref := &corev1.ObjectReference{APIVersion: v1beta1.SchemeGroupVersion.String(), Kind: v1beta1.Kind,
			Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}
		r.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonInvalid, "nri-cni (node %s): %s: %s", r.node, n.Reason, n.Message)
	}
}

// policyChanged forgets what was noted of a policy at an older generation
// (or deleted: cur nil).
func (r *reporter) policyChanged(namespace, name string, cur *netpol.Policy) {
	key := namespace + "/" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.invalid[key]; ok && (cur == nil || cur.Generation != g) {
		delete(r.invalid, key)
		prefix := key + "/" + itoa(g) + "/"
		for k := range r.told {
			if len(k) > len(prefix) && k[:len(prefix)] == prefix {
				delete(r.told, k)
			}
		}
		r.gauge()
	}
}

func (r *reporter) gauge() {
	if r.observer != nil {
		r.observer.SetMNPInvalidPolicies(len(r.invalid))
	}
}

// notSynced tells a pod its covered interfaces got the deny-all table.
func (r *reporter) notSynced(pod LocalPod, why string) {
	if r.recorder == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.podTold[pod.UID] || !r.take() {
		return
	}
	r.podTold[pod.UID] = true
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	r.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonNotSynced,
		"nri-cni (node %s): MultiNetworkPolicy caches not synced (%s): the pod's secondary interfaces are deny-all until they are", r.node, why)
}

// podGone forgets a pod told NotSynced.
func (r *reporter) podGone(uid string) {
	r.mu.Lock()
	delete(r.podTold, uid)
	r.mu.Unlock()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
