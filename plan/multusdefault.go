package plan

// Multus's v1.multus-cni.io/default-network: a pod asks Multus to put its
// eth0 on another network than the cluster network. nri-cni never touches
// eth0 (the runtime's own network; nri-cni adds secondary networks beside
// it), so it cannot honour the annotation, and starting the pod on the
// cluster network instead would put it on a network it did not ask for.
//
// Refused only where nri-cni would otherwise serve the pod (attach at least
// one network to it): a pod nri-cni leaves alone is not nri-cni's to fail,
// and while Multus is the node's primary network (a cluster in migration)
// Multus honours the annotation itself. migrate-check lists every such pod
// beforehand (migrate/defaultnetwork.go).

import (
	"errors"
	"fmt"
)

// AnnotationMultusDefaultNetwork is Multus's annotation that replaces a
// pod's cluster network (eth0).
const AnnotationMultusDefaultNetwork = "v1.multus-cni.io/default-network"

// ErrDefaultNetworkAnnotation: a pod nri-cni serves asks for another eth0
// with Multus's annotation.
var ErrDefaultNetworkAnnotation = errors.New("nri-cni never replaces the pod's default network (eth0)")

// served is pl unless the pod asks, with Multus's annotation, for an eth0
// nri-cni cannot give it while nri-cni attaches networks to it (and Multus
// is not the node's primary network, multusPrimary).
func served(pod Pod, pl Plan, multusPrimary bool) (Plan, error) {
	value, ok := pod.Annotations[AnnotationMultusDefaultNetwork]
	if !ok || len(pl.Attachments) == 0 || multusPrimary {
		return pl, nil
	}
	return Plan{}, fmt.Errorf("annotation %s=%q refused: %w: the annotation asks Multus to put the pod's eth0 on that "+
		"network instead of the cluster network; nri-cni adds secondary networks beside the runtime's eth0, so the pod "+
		"would start on a network it did not ask for. Remove the annotation, or run the pod where Multus is the node's "+
		"primary network", AnnotationMultusDefaultNetwork, clip(value), ErrDefaultNetworkAnnotation)
}

// clip shortens a value quoted in an error to its first 64 bytes.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
