package migrate

// Multus's eth0 and default networks, in the check.
//
//   - v1.multus-cni.io/default-network: Multus replaces the pod's cluster
//     network (delegate 0, eth0) with the NAD it names
//     (tryLoadK8sPodDefaultNetwork). nri-cni never replaces eth0: a pod it
//     would attach networks to is refused (plan.ErrDefaultNetworkAnnotation),
//     and one it would not starts on the cluster network. Either way it
//     differs, so every pod carrying the annotation is judged, with the
//     NPWG annotation or without.
//   - defaultNetworks: Multus adds them to every pod outside its
//     systemNamespaces, as delegates 1…K (net1…netK), before the
//     annotation's, whose unnamed elements are then numbered net(K+i)
//     (GetDefaultNetworks, getIfname). The check compares as if Multus's
//     defaultNetworks were nri.conf's (the migration copies them over):
//     nri-cni plans them first and names them the same way.

import (
	"fmt"

	"github.com/nri-cni/nri-cni/plan"
)

// ReasonDefaultNetwork: the pod asks Multus for another eth0
// (v1.multus-cni.io/default-network), which nri-cni never gives.
const ReasonDefaultNetwork = Reason("default-network")

// Judges reports whether the check judges a pod with these annotations: it
// asks for networks (the NPWG annotation) or for another eth0 (Multus's
// default-network annotation). kube.Reader keeps only such pods.
func Judges(ann map[string]string) bool {
	_, npwg := ann[plan.AnnotationNPWGNetworks]
	_, eth0 := ann[plan.AnnotationMultusDefaultNetwork]
	return npwg || eth0
}

// defaultNetworkIgnored fills r for a pod nri-cni planned without an error
// that asks Multus for another eth0: nri-cni attaches nothing to it (it
// would have refused it otherwise), so it starts on the cluster network.
// false when the pod does not ask.
func defaultNetworkIgnored(pod Pod, p plan.Plan, r *PodReport) bool {
	value, ok := pod.Annotations[plan.AnnotationMultusDefaultNetwork]
	if !ok {
		return false
	}
	r.Verdict, r.Multus, r.Reason = Ignore, Differs, ReasonDefaultNetwork
	r.Detail = fmt.Sprintf("%s=%q: Multus puts the pod's eth0 on that network; nri-cni never replaces eth0, so the pod "+
		"starts on the cluster network", plan.AnnotationMultusDefaultNetwork, value)
	if p.Skip != "" {
		r.Detail += "; " + p.Skip
	}
	return true
}

// defaultCount is the number of default networks leading atts.
func defaultCount(atts []plan.Attachment) int {
	k := 0
	for k < len(atts) && atts[k].Default {
		k++
	}
	return k
}

// position names the attachment at index i of a plan with k default
// networks: a default network, or the annotation's element.
func position(i, k int) string {
	if i < k {
		return fmt.Sprintf("default network %d", i+1)
	}
	return fmt.Sprintf("element %d", i-k+1)
}
