package oci

// Whose word the OCI hook takes for a container's pod identity. Under a CRI
// runtime the spec's annotations mix the runtime's keys with the pod's own
// annotations (anyone who may create a pod), so the hook reads only keys the
// runtime in use writes after the pod's:
//
//   - CRI-O (io.kubernetes.cri-o.SandboxName present: CRI-O writes it on
//     every container, podman 4.3 does not): io.kubernetes.pod.{name,
//     namespace,uid}, the kubelet's labels, which CRI-O copies after the
//     pod's annotations; the sandbox id is state.id on a sandbox container,
//     else io.kubernetes.cri-o.SandboxID (set after the pod's annotations on
//     app containers). Pod annotations override CRI-O's own keys on the
//     sandbox container, and CRI-O never writes io.kubernetes.cri.*.
//   - containerd's CRI (io.kubernetes.cri.container-type present): its
//     io.kubernetes.cri.sandbox-{name,namespace,uid,id}, written after the
//     pod_annotations pass-through.
//   - Both present: one is the pod's; refused.
//   - Neither (runc, ctr, podman: run by the node's own users): the
//     configured hook.* lists, the first annotation present winning.
//
// Without a value the pod name is the container id, the namespace
// "default", the uid empty and the sandbox id the container id.

import (
	"errors"
	"fmt"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

// Annotation keys the runtimes write themselves.
const (
	annCRIOSandboxName   = "io.kubernetes.cri-o.SandboxName"
	annCRIOContainerType = "io.kubernetes.cri-o.ContainerType"
	annCRIOSandboxID     = "io.kubernetes.cri-o.SandboxID"
	annKubePodName       = "io.kubernetes.pod.name"
	annKubePodNamespace  = "io.kubernetes.pod.namespace"
	annKubePodUID        = "io.kubernetes.pod.uid"

	annCRIContainerType    = "io.kubernetes.cri.container-type"
	annCRISandboxName      = "io.kubernetes.cri.sandbox-name"
	annCRISandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	annCRISandboxUID       = "io.kubernetes.cri.sandbox-uid"
	annCRISandboxID        = "io.kubernetes.cri.sandbox-id"
)

// Which rules gave a container its identity.
const (
	identityCRIO       = "cri-o"
	identityContainerd = "containerd"
	identityGeneric    = "annotations" // the configured hook.* lists
)

// ErrIdentity is wrapped by every error about a container's pod identity.
var ErrIdentity = errors.New("cannot tell the container's pod")

// ociIdentity returns the pod identity of container id (state.id) from its
// annotations, and which rules gave it (identityCRIO, …).
func ociIdentity(id string, ann map[string]string, hc config.HookConfig) (cni.PodIdentity, string, error) {
	_, crio := ann[annCRIOSandboxName]
	_, containerd := ann[annCRIContainerType]
	pod := cni.PodIdentity{Name: id, Namespace: "default", InfraID: id}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	switch {
	case crio && containerd:
		return pod, "", fmt.Errorf("%w: annotations %s (CRI-O) and %s (containerd) are both present: one of them is the pod's own",
			ErrIdentity, annCRIOSandboxName, annCRIContainerType)
	case crio:
		switch t := ann[annCRIOContainerType]; t {
		case "sandbox":
		case "container":
			if ann[annCRIOSandboxID] == "" {
				return pod, "", fmt.Errorf("%w: CRI-O app container without annotation %s", ErrIdentity, annCRIOSandboxID)
			}
			pod.InfraID = ann[annCRIOSandboxID]
		default:
			return pod, "", fmt.Errorf("%w: annotation %s: %q is neither sandbox nor container", ErrIdentity, annCRIOContainerType, t)
		}
		set(&pod.Name, ann[annKubePodName])
		set(&pod.Namespace, ann[annKubePodNamespace])
		pod.UID = ann[annKubePodUID]
		return pod, identityCRIO, nil
	case containerd:
		set(&pod.Name, ann[annCRISandboxName])
		set(&pod.Namespace, ann[annCRISandboxNamespace])
		pod.UID = ann[annCRISandboxUID]
		set(&pod.InfraID, ann[annCRISandboxID])
		return pod, identityContainerd, nil
	}
	first := func(dst *string, keys []string) {
		for _, k := range keys {
			if v := ann[k]; v != "" {
				*dst = v
				return
			}
		}
	}
	first(&pod.Name, hc.PodNameAnnotations)
	first(&pod.Namespace, hc.PodNamespaceAnnotations)
	first(&pod.UID, hc.PodUIDAnnotations)
	first(&pod.InfraID, hc.SandboxIDAnnotations)
	return pod, identityGeneric, nil
}
