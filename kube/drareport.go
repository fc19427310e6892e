package kube

// What the DRA driver leaves out of the node's ResourceSlice, reported:
// the gauge nri_cni_dra_unpublished{reason} (every refresh) and, for the
// reasons that are the same on every node and the NAD owner's to fix (a
// name the API cannot hold, a duplicate, the namespace's share or the
// node's budget used up: dra.TenantFixable), a Warning Event on the
// NetworkAttachmentDefinition. Every node sees the same NADs, so every node
// would tell: each tells a NAD once per object version and reason, and at
// most eventBurst Events at once, then one per eventEvery — a tenant's
// thousand bad NADs cost each node a few Events a minute, not a thousand.

import (
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/kube/dra"
)

// ReasonDRANotPublished is the reason of the Warning Event on a NAD the DRA
// driver cannot publish.
const ReasonDRANotPublished = "DRADeviceNotPublished"

// Bounds of the Events one node raises about NADs.
const (
	eventBurst = 10
	eventEvery = 30 * time.Second
)

// DRAObserver is the metrics side of the report (metrics.Metrics): the
// networks not published now, by reason.
type DRAObserver interface {
	SetDRAUnpublished(byReason map[string]int)
	// SetDRACheckpointUnreadable: whether the kubelet's DRA checkpoint
	// cannot be read, by reason (dracheckpoint.go).
	SetDRACheckpointUnreadable(byReason map[string]bool)
}

// nadLookup finds a NAD in the cache: its reference for an Event and its
// resourceVersion; ok false when it is gone.
type nadLookup func(namespace, name string) (ref *corev1.ObjectReference, version string, ok bool)

// draReport implements dra.Reporter.
type draReport struct {
	node     string
	observer DRAObserver          // nil: no metrics
	recorder record.EventRecorder // nil: no Events
	lookup   nadLookup
	now      func() time.Time

	mu     sync.Mutex        // guards told, tokens, at, checkpointTold
	told   map[string]string // NAD (namespace/name) -> what it was told: version and class
	tokens float64
	at     time.Time
	// checkpointTold: the reasons the Node was told the kubelet's DRA
	// checkpoint cannot be read for (dracheckpoint.go).
	checkpointTold map[string]bool
}

func newDRAReport(node string, observer DRAObserver, recorder record.EventRecorder, lookup nadLookup) *draReport {
	return &draReport{node: node, observer: observer, recorder: recorder, lookup: lookup, now: time.Now,
		told: map[string]string{}, tokens: eventBurst, checkpointTold: map[string]bool{}}
}

// Unpublished implements dra.Reporter.
func (r *draReport) Unpublished(skipped []dra.Skip) {
	if r.observer != nil {
		counts := make(map[string]int, len(dra.SkipClasses))
		for _, c := range dra.SkipClasses {
			counts[c] = 0
		}
		for _, s := range skipped {
			counts[s.Class]++
		}
		r.observer.SetDRAUnpublished(counts)
	}
	if r.recorder == nil || r.lookup == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.tokens = min(eventBurst, r.tokens+float64(now.Sub(r.at))/float64(eventEvery))
	r.at = now
	still := make(map[string]bool, len(skipped))
	for _, s := range skipped {
		if s.Namespace == "" || !dra.TenantFixable(s.Class) {
			continue
		}
		still[s.Network] = true
		name, isNAD := strings.CutPrefix(s.Network, s.Namespace+"/")
		ref, version, ok := r.lookup(s.Namespace, name)
		if !isNAD || !ok {
			continue
		}
		said := version + "/" + s.Class
		if r.told[s.Network] == said || r.tokens < 1 {
			continue // told already, or later (the next refresh)
		}
		r.tokens--
		r.told[s.Network] = said
		r.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonDRANotPublished,
			"nri-cni (node %s): not published as a device of DRA driver %s, so claims cannot get it here: %s",
			r.node, dra.DriverName, s.Reason)
	}
	for k := range r.told {
		if !still[k] {
			delete(r.told, k) // published again (or gone): a later refusal is told again
		}
	}
}

// nadRef is the NAD's reference for an Event, from the cache.
func (s *NADSource) nadRef(namespace, name string) (*corev1.ObjectReference, string, bool) {
	obj, err := s.cached(namespace, name)
	if err != nil || obj == nil {
		return nil, "", false
	}
	return &corev1.ObjectReference{APIVersion: "k8s.cni.cncf.io/v1", Kind: "NetworkAttachmentDefinition",
		Namespace: namespace, Name: name, UID: obj.UID, ResourceVersion: obj.ResourceVersion}, obj.ResourceVersion, true
}

// eventRecorder is the recorder the status writer raises its Events with.
func (w *StatusWriter) eventRecorder() record.EventRecorder { return w.recorder }
