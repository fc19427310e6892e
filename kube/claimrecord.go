package kube

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReasonClaimRecordMissing: the kubelet holds a ResourceClaim as prepared by
// nri-cni.io, nri-cni has no readable record of it and could not rebuild
// one (kube/dra/records.go): the pod's networks fail closed.
const ReasonClaimRecordMissing = "ClaimRecordMissing"

// ClaimRecordMissing implements dra.RecordWarner: a Warning Event on the
// claim (the recorder queues it; it never blocks).
func (w *StatusWriter) ClaimRecordMissing(namespace, name, uid, message string) {
	ref := &corev1.ObjectReference{Kind: "ResourceClaim", APIVersion: resourcev1.SchemeGroupVersion.String(),
		Namespace: namespace, Name: name, UID: types.UID(uid)}
	w.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonClaimRecordMissing, "nri-cni: %s", message)
}
