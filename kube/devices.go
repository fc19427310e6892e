package kube

import (
	"context"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube/podresources"
)

// DeviceSource is the kubelet's PodResources API as the engine asks it:
// which devices of a device plugin resource the kubelet allocated to a pod.
type DeviceSource struct{ Client *podresources.Client }

// DeviceIDs implements attach.DeviceSource.
func (d DeviceSource) DeviceIDs(ctx context.Context, pod attach.DevicePod, resourceName string) ([]string, error) {
	return d.Client.DeviceIDs(ctx, podresources.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, resourceName)
}
