package k8s

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/k8sdra"
)

// netRequest asks for one device of network (a confDir network's name or a
// NAD's "namespace/name"), with an optional NetworkConfig (JSON object
// members, "" for none).
type netRequest struct {
	name, network, config, class string
}

// claimTemplate creates a ResourceClaimTemplate in ns whose requests each
// select one network by the device attribute nri-cni publishes.
func (f *fixture) claimTemplate(ns, name string, reqs ...netRequest) {
	f.t.Helper()
	var rs []k8sdra.NetRequest
	for _, r := range reqs {
		rs = append(rs, k8sdra.NetRequest{Name: r.name, Network: r.network, Config: r.config, Class: r.class})
	}
	_, err := f.k.ResourceV1().ResourceClaimTemplates(ns).Create(f.ctx,
		k8sdra.ClaimTemplate(ns, name, map[string]string{ownerLabel: f.owner}, rs...), metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() {
		_ = f.k.ResourceV1().ResourceClaimTemplates(ns).Delete(f.ctx, name, metav1.DeleteOptions{})
	})
}

// deviceClass creates an admin's DeviceClass selecting nri-cni.io's devices
// with an opaque NetworkConfig of members (JSON object members); the
// cleanup deletes it.
func (f *fixture) deviceClass(name, members string) {
	f.t.Helper()
	_, err := f.k.ResourceV1().DeviceClasses().Create(f.ctx, &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ownerLabel: f.owner}},
		Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q", dra.DriverName)}}},
			Config: []resourcev1.DeviceClassConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
				Opaque: k8sdra.NetworkConfig(members)}}},
		}}, metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = f.k.ResourceV1().DeviceClasses().Delete(f.ctx, name, metav1.DeleteOptions{}) })
}

// claimPod is f.pod with one pod claim per template (claim name = template
// name).
func (f *fixture) claimPod(name, ns string, annotations map[string]string, templates ...string) *corev1.Pod {
	p := f.pod(name, ns, annotations)
	for _, tmpl := range templates {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: tmpl, ResourceClaimTemplateName: &tmpl})
	}
	return p
}

// podClaims are the names of the ResourceClaims made for the pod, by pod
// claim name.
func (f *fixture) podClaims(pod *corev1.Pod) map[string]string {
	f.t.Helper()
	p, err := f.k.CoreV1().Pods(pod.Namespace).Get(f.ctx, pod.Name, metav1.GetOptions{})
	require.NoError(f.t, err)
	out := map[string]string{}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			out[s.Name] = *s.ResourceClaimName
		}
	}
	return out
}

// claimStatus waits until the claim's status.devices has want entries of
// nri-cni.io with networkData and returns them.
func (f *fixture) claimStatus(ns, name string, want int) []resourcev1.AllocatedDeviceStatus {
	f.t.Helper()
	var out []resourcev1.AllocatedDeviceStatus
	f.waitFor(fmt.Sprintf("status.devices of ResourceClaim %s/%s (%d)", ns, name, want), waitLong, func() (bool, string) {
		c, err := f.k.ResourceV1().ResourceClaims(ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		out = k8sdra.NetworkDevices(c)
		return len(out) == want, fmt.Sprintf("status %s", toJSON(c.Status))
	})
	return out
}

// claimFiles are nri-cni's prepared-claim records on the node.
func (f *fixture) claimFiles() []string { return k8sdra.ClaimRecords(f.w.o.StateDir) }

// waitClaimsReleased waits until the node has no prepared-claim record of
// the claims (by UID).
func (f *fixture) waitClaimsReleased(uids ...string) {
	f.t.Helper()
	f.waitFor("prepared-claim records released", waitLong, func() (bool, string) {
		var left []string
		for _, u := range uids {
			if k8sdra.ClaimRecorded(f.w.o.StateDir, u) {
				left = append(left, u)
			}
		}
		return len(left) == 0, fmt.Sprintf("left: %v", left)
	})
}

// nodeSlice returns the devices of this node's ResourceSlices of nri-cni.io
// once one holds network (by its network attribute).
func (f *fixture) nodeDevices(network string) []resourcev1.Device {
	f.t.Helper()
	var devs []resourcev1.Device
	f.waitFor("a device of network "+network+" published", waitLong, func() (bool, string) {
		var err error
		if devs, err = k8sdra.NodeDevices(f.ctx, f.k, f.w.c.NodeName); err != nil {
			return false, err.Error()
		}
		return k8sdra.HasNetwork(devs, network), fmt.Sprintf("%d devices", len(devs))
	})
	return devs
}

// serverAtLeast reports whether the API server is at least v (e.g. "1.36").
func (f *fixture) serverAtLeast(v string) bool {
	f.t.Helper()
	sv, err := f.k.Discovery().ServerVersion()
	require.NoError(f.t, err)
	got, err := version.ParseGeneric(sv.GitVersion)
	require.NoError(f.t, err)
	return got.AtLeast(version.MustParseGeneric(v))
}

// cniResult is the part of a claim device's data (the CNI result) the
// tests read.
type cniResult struct {
	CNIVersion string `json:"cniVersion"`
	IPs        []struct {
		Address string `json:"address"`
	} `json:"ips"`
}

func decodeResult(raw []byte) (cniResult, error) {
	var r cniResult
	err := json.Unmarshal(raw, &r)
	return r, err
}

// podScheduledFalse waits for the pod's PodScheduled=False condition and
// returns its reason and message.
func (f *fixture) podScheduledFalse(ns, name string) (string, string) {
	f.t.Helper()
	var reason, msg string
	f.waitFor("pod "+ns+"/"+name+" unschedulable", waitLong, func() (bool, string) {
		p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				reason, msg = c.Reason, c.Message
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %v", p.Status.Conditions)
	})
	return reason, msg
}

// shortWait is how long a test watches for something that must not happen.
const shortWait = 10 * time.Second
