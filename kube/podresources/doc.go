// Package podresources asks the kubelet which devices it allocated to a pod:
// the PodResources API (k8s.io/kubelet/pkg/apis/podresources/v1) on the
// kubelet's unix socket, by default /var/lib/kubelet/pod-resources/kubelet.sock.
// A NetworkAttachmentDefinition annotated k8s.v1.cni.cncf.io/resourceName
// names a device plugin resource; at attach, the network's device is one of
// the device IDs the kubelet allocated to the pod for that resource
// (Client.DeviceIDs). The kubelet allocates devices when it admits a pod,
// before it asks the runtime for the pod's sandbox, so the answer is there by
// the time RunPodSandbox reaches nri-cni. No API server call is involved.
//
// # Storms
//
// The kubelet rate-limits the PodResources service node-wide, for all of its
// clients together: a token bucket of 100 requests per second with a burst
// of 10 (podresources.DefaultQPS, DefaultBurstTokens in
// k8s.io/kubernetes/pkg/kubelet/apis/podresources/constants.go, v1.37.2;
// applied as a unary interceptor by pkg/kubelet/server.ListenAndServePodResources,
// which answers codes.ResourceExhausted "rejected by rate limit" at once,
// without queueing). Multus asks with one List per pod and does not retry, so
// a burst of pods fails (multus-cni #1545). This client:
//
//   - asks with Get (one pod) while few pods are wanted at once, and with one
//     List (every pod of the node) once MaxParallelGets Gets are in flight or
//     when the kubelet does not serve Get (before 1.34 it is behind a feature
//     gate; before 1.27 it does not exist): a storm of 100 pods costs a few
//     calls, not 100;
//   - coalesces: one call in flight serves every lookup waiting for it (one
//     List for all pods, one Get per pod), and a List answer serves lookups
//     for ListReuse after it started;
//   - caches each pod's answer by pod UID for CacheTTL (bounded by MaxEntries),
//     so the several networks of a pod and the runtime's retries cost nothing;
//   - spends at most QPS (burst Burst) of the kubelet's budget, and retries
//     ResourceExhausted and Unavailable with a jittered exponential backoff
//     until the caller's deadline (CallTimeout at most per call).
//
// Freshness. The kubelet's answers carry no pod UID. A pod present in an
// answer is taken from it; a pod (or resource) absent from an answer counts
// only if the call started after the lookup began, otherwise a fresh call is
// made: an older answer may predate the pod's admission.
//
// # Order of device IDs
//
// The kubelet lists a container's devices in Go map order, which changes from
// call to call (pkg/kubelet/cm.containerDevicesFromResourceDeviceInstances),
// and lists a device once per NUMA node it reports. So "as the kubelet lists
// them" is not an order. PodResources.DeviceIDs returns the pod's device IDs
// of one resource, over all its containers, without duplicates, sorted
// ascending (bytewise): the order Multus uses (its types.SortDeviceIDs),
// so the k-th network of a resource in the pod's annotation gets the same
// device under nri-cni as under Multus, and the same on every retry.
//
// Library code: it does not log. Errors name the pod and the resource.
package podresources
