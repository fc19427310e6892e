package cni

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
)

// Device keys a network's plugins get in their own config when the network
// takes a device the kubelet allocated to the pod (a NetworkAttachmentDefinition
// with k8s.v1.cni.cncf.io/resourceName): what Multus writes into every plugin
// of a delegate's conflist, so that plugins reading the device from their
// config (sriov-cni: "deviceID"; host-device: "pciBusID") find it as they do
// under Multus. Plugins that declare the deviceID capability also get it as
// runtimeConfig.deviceID.
const (
	ConfKeyDeviceID = "deviceID"
	ConfKeyPCIBusID = "pciBusID"
)

// WithDevice returns a copy of n whose every plugin config carries
// deviceID (ConfKeyDeviceID and ConfKeyPCIBusID). n is not changed: the
// networks of the NetworkAttachmentDefinition cache are shared.
func (n *Network) WithDevice(deviceID string) (*Network, error) {
	if n == nil || n.List == nil {
		return nil, fmt.Errorf("network without a config: no device to give its plugins")
	}
	var raw map[string]any
	if err := json.Unmarshal(n.List.Bytes, &raw); err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	plugins, ok := raw["plugins"].([]any)
	if !ok || len(plugins) == 0 {
		return nil, fmt.Errorf("network %q: no plugins list", n.Name)
	}
	for i, p := range plugins {
		m, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("network %q: plugins[%d] is not an object", n.Name, i)
		}
		m[ConfKeyDeviceID] = deviceID
		m[ConfKeyPCIBusID] = deviceID
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("network %q with device %q: %w", n.Name, deviceID, err)
	}
	out := *n
	out.List = list
	return &out, nil
}
