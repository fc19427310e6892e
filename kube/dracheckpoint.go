package kube

// The kubelet's DRA checkpoint, when nri-cni cannot read it (kube/dra's
// record keeper tells it at each change): the gauge
// nri_cni_dra_checkpoint_unreadable{reason} and a Warning Event on the
// Node, once per reason in nri-cni's life — an unreadable checkpoint is the
// node's state (a newer kubelet's format, another kubeletDir), not a
// tenant's, and stays until nri-cni or its config changes, so telling it
// again every pass would only repeat it.

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/kube/dra"
)

// ReasonDRACheckpointUnreadable is the reason of the Warning Event on the
// Node when nri-cni cannot read the kubelet's DRA checkpoint.
const ReasonDRACheckpointUnreadable = "DRACheckpointUnreadable"

// KubeletCheckpoint implements dra.CheckpointReporter.
func (r *draReport) KubeletCheckpoint(path, reason string, err error) {
	if r.observer != nil {
		byReason := make(map[string]bool, len(dra.CheckpointReasons))
		for _, c := range dra.CheckpointReasons {
			byReason[c] = c == reason
		}
		r.observer.SetDRACheckpointUnreadable(byReason)
	}
	if reason == "" || r.recorder == nil {
		return
	}
	r.mu.Lock()
	told := r.checkpointTold[reason]
	r.checkpointTold[reason] = true
	r.mu.Unlock()
	if told {
		return
	}
	r.recorder.Eventf(nodeRef(r.node), corev1.EventTypeWarning, ReasonDRACheckpointUnreadable,
		"nri-cni: cannot read the kubelet's DRA checkpoint %s (%s): %v. Until it can, a lost prepared-claim record of "+
			"driver %s is detected only for pods nri-cni attached before, and an unreadable record holds back the pods it "+
			"could be of (nri-cni status lists them; docs/dra.md, \"A lost record fails the pod closed\")",
		path, reason, err, dra.DriverName)
}

// nodeRef is the Node's reference for an Event, as the kubelet makes it
// (its UID is the node's name), so `kubectl describe node` shows it.
func nodeRef(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
}

// NewDRAReporter is the report of the DRA driver of node as StartDRA wires
// it (the metrics of observer, if not nil; Events through recorder, if not
// nil), for a driver built without StartDRA (tests on a real cluster). It
// raises no Events about NADs (it has no NAD cache).
func NewDRAReporter(node string, observer DRAObserver, recorder record.EventRecorder) dra.Reporter {
	return newDRAReport(node, observer, recorder, nil)
}

var _ dra.CheckpointReporter = (*draReport)(nil)
