package k8scrio

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/k8sdeploy"
	"github.com/nri-cni/nri-cni/test/k8sdra"
)

// The networks the tests ask for: NADs (NPWG annotation) and
// ResourceClaimTemplates (DRA), and what nri-cni reports back.

const (
	npwgAnnotation   = "k8s.v1.cni.cncf.io/networks"
	statusAnnotation = "k8s.v1.cni.cncf.io/network-status"
)

// nadNet is a NetworkAttachmentDefinition in default: a bridge network with
// host-local IPAM on a bridge and subnet of its own, both allowed by
// deploy/base's NAD policy.
type nadNet struct {
	Name, CNIName, Bridge, Subnet string
}

// newNAD creates the NAD; the test's cleanup deletes it and its bridge.
func (f *fixture) newNAD(name string) *nadNet {
	f.t.Helper()
	n := &nadNet{Name: name, CNIName: "cni-" + name, Bridge: k8sdeploy.NADBridge(), Subnet: k8sdeploy.NADSubnet()}
	conf, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": n.CNIName,
		"plugins": []any{map[string]any{"type": "bridge", "bridge": n.Bridge, "isGateway": false, "ipMasq": false,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": n.Subnet}}}}}},
	})
	nads, err := nadclient.NewForConfig(f.w.c.RESTConfig)
	require.NoError(f.t, err)
	api := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default")
	_, err = api.Create(f.ctx, &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{ownerLabel: f.owner}},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: string(conf)}}, metav1.CreateOptions{})
	require.NoError(f.t, err, "NAD %s", name)
	f.t.Cleanup(func() {
		_ = api.Delete(f.ctx, name, metav1.DeleteOptions{})
		if _, err := net.InterfaceByName(n.Bridge); err == nil {
			if out, err := exec.Command("ip", "link", "del", n.Bridge).CombinedOutput(); err != nil {
				f.t.Errorf("ip link del %s: %v: %s", n.Bridge, err, out)
			}
		}
	})
	return n
}

// contains reports whether addr ("ip/len" or "ip") is in the subnet.
func contains(subnet, addr string) bool {
	_, n, err := net.ParseCIDR(subnet)
	ip := net.ParseIP(strings.Split(addr, "/")[0])
	return err == nil && ip != nil && n.Contains(ip)
}

// networkStatus waits until the pod's network-status annotation holds want
// entries and returns them.
func (f *fixture) networkStatus(name string, want int) []nadv1.NetworkStatus {
	f.t.Helper()
	var entries []nadv1.NetworkStatus
	f.waitFor(fmt.Sprintf("network-status of %s with %d entries", name, want), waitLong, func() (bool, string) {
		p, err := f.k.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		v, ok := p.Annotations[statusAnnotation]
		if !ok {
			return false, "no annotation"
		}
		entries = nil
		if err := json.Unmarshal([]byte(v), &entries); err != nil {
			return false, err.Error()
		}
		return len(entries) == want, v
	})
	return entries
}

// waitDevice waits until the node publishes a device of network (the DRA
// driver republishes after a NAD change).
func (f *fixture) waitDevice(network string) {
	f.t.Helper()
	f.waitFor("a device of network "+network+" published", waitLong, func() (bool, string) {
		devs, err := k8sdra.NodeDevices(f.ctx, f.k, f.w.c.NodeName)
		if err != nil {
			return false, err.Error()
		}
		return k8sdra.HasNetwork(devs, network), fmt.Sprintf("%d devices", len(devs))
	})
}

// claimTemplate creates a ResourceClaimTemplate in default asking for one
// device of network, with the NetworkConfig members config ("" for none).
func (f *fixture) claimTemplate(name, network, config string) {
	f.t.Helper()
	api := f.k.ResourceV1().ResourceClaimTemplates("default")
	_, err := api.Create(f.ctx, k8sdra.ClaimTemplate("default", name, map[string]string{ownerLabel: f.owner},
		k8sdra.NetRequest{Name: "net", Network: network, Config: config}), metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = api.Delete(f.ctx, name, metav1.DeleteOptions{}) })
}

// claimPod is f.pod with one pod claim from the template (claim name =
// template name).
func (f *fixture) claimPod(name, template string) *corev1.Pod {
	p := f.pod(name, nil)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: template, ResourceClaimTemplateName: &template}}
	return p
}

// podClaim is the ResourceClaim made for the pod's claim from template.
func (f *fixture) podClaim(pod *corev1.Pod, template string) *resourcev1.ResourceClaim {
	f.t.Helper()
	p, err := f.k.CoreV1().Pods("default").Get(f.ctx, pod.Name, metav1.GetOptions{})
	require.NoError(f.t, err)
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == template && s.ResourceClaimName != nil {
			c, err := f.k.ResourceV1().ResourceClaims("default").Get(f.ctx, *s.ResourceClaimName, metav1.GetOptions{})
			require.NoError(f.t, err)
			return c
		}
	}
	f.t.Fatalf("pod %s has no claim from template %s: %+v", pod.Name, template, p.Status.ResourceClaimStatuses)
	return nil
}

// claimStatus waits until the claim's status.devices has one nri-cni.io
// entry with networkData and returns it.
func (f *fixture) claimStatus(claim string) resourcev1.AllocatedDeviceStatus {
	f.t.Helper()
	var out []resourcev1.AllocatedDeviceStatus
	f.waitFor("status.devices of ResourceClaim "+claim, waitLong, func() (bool, string) {
		c, err := f.k.ResourceV1().ResourceClaims("default").Get(f.ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		out = k8sdra.NetworkDevices(c)
		data, _ := json.Marshal(c.Status)
		return len(out) == 1, string(data)
	})
	return out[0]
}

// waitClaimReleased waits until nri-cni's prepared-claim record of the
// claim (by UID) is gone.
func (f *fixture) waitClaimReleased(uid string) {
	f.t.Helper()
	f.waitFor("prepared-claim record of "+uid+" released", waitLong, func() (bool, string) {
		return !k8sdra.ClaimRecorded(f.w.o.StateDir, uid), fmt.Sprintf("records: %v", k8sdra.ClaimRecords(f.w.o.StateDir))
	})
}
