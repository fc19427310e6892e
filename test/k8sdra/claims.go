// Package k8sdra is what the Kubernetes tiers (test/k8s on containerd,
// test/k8scrio on CRI-O) share to ask nri-cni's DRA driver for networks and
// to read back what it did: ResourceClaimTemplates selecting a network by the
// device attribute nri-cni publishes, the claim's status.devices, the node's
// published devices and nri-cni's prepared-claim records. Like the harness,
// it does not import "testing".
package k8sdra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/nri-cni/nri-cni/kube/dra"
)

// NetRequest asks for one device of Network (a confDir network's name or a
// NAD's "namespace/name"), with an optional NetworkConfig (JSON object
// members, "" for none), under request name Name, of DeviceClass Class (""
// = the shipped class nri-cni.io).
type NetRequest struct {
	Name, Network, Config, Class string
}

// NetworkConfig is an opaque config for driver nri-cni.io: a NetworkConfig
// with members (JSON object members).
func NetworkConfig(members string) *resourcev1.OpaqueDeviceConfiguration {
	return &resourcev1.OpaqueDeviceConfiguration{Driver: dra.DriverName, Parameters: runtime.RawExtension{
		Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig",` + members + `}`)}}
}

// ClaimTemplate is a ResourceClaimTemplate ns/name whose requests each
// select one network by nri-cni's `network` device attribute.
func ClaimTemplate(ns, name string, labels map[string]string, reqs ...NetRequest) *resourcev1.ResourceClaimTemplate {
	spec := resourcev1.ResourceClaimSpec{}
	for _, r := range reqs {
		class := r.Class
		if class == "" {
			class = dra.DriverName
		}
		spec.Devices.Requests = append(spec.Devices.Requests, resourcev1.DeviceRequest{Name: r.Name,
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, Selectors: []resourcev1.DeviceSelector{{
				CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf(`device.attributes[%q].%s == %q`,
					dra.DriverName, dra.AttrNetwork, r.Network)}}}}})
		if r.Config != "" {
			spec.Devices.Config = append(spec.Devices.Config, resourcev1.DeviceClaimConfiguration{Requests: []string{r.Name},
				DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: NetworkConfig(r.Config)}})
		}
	}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: spec},
	}
}

// NetworkDevices are the claim's status.devices entries nri-cni wrote
// (driver nri-cni.io, with networkData).
func NetworkDevices(c *resourcev1.ResourceClaim) []resourcev1.AllocatedDeviceStatus {
	var out []resourcev1.AllocatedDeviceStatus
	for _, d := range c.Status.Devices {
		if d.Driver == dra.DriverName && d.NetworkData != nil {
			out = append(out, d)
		}
	}
	return out
}

// NodeDevices are the devices of nri-cni's ResourceSlices for node.
func NodeDevices(ctx context.Context, k kubernetes.Interface, node string) ([]resourcev1.Device, error) {
	l, err := k.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + dra.DriverName})
	if err != nil {
		return nil, fmt.Errorf("listing the ResourceSlices of node %s: %w", node, err)
	}
	var devs []resourcev1.Device
	for _, s := range l.Items {
		devs = append(devs, s.Spec.Devices...)
	}
	return devs, nil
}

// HasNetwork reports whether one of devs is network (by its attribute).
func HasNetwork(devs []resourcev1.Device, network string) bool {
	for _, d := range devs {
		if a, ok := d.Attributes[dra.AttrNetwork]; ok && a.StringValue != nil && *a.StringValue == network {
			return true
		}
	}
	return false
}

// ClaimRecords are nri-cni's prepared-claim records in its state dir.
func ClaimRecords(stateDir string) []string {
	m, _ := filepath.Glob(filepath.Join(stateDir, "claims", "*.json"))
	return m
}

// ClaimRecorded reports whether the claim (by UID) has a prepared-claim
// record in stateDir.
func ClaimRecorded(stateDir, uid string) bool {
	_, err := os.Stat(filepath.Join(stateDir, "claims", uid+".json"))
	return err == nil
}
