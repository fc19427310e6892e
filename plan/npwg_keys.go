package plan

// Selection element keys that pods written for Multus carry and nri-cni
// refuses, each with the reason in the pod's error instead of the JSON
// decoder's "unknown field". The NPWG spec v1.3 defines name, namespace,
// ips, mac, interface, cni-args, portMappings, bandwidth, default-route,
// infiniband-guid and ipam-claim-reference (4.1.2.1); nri-cni implements
// all but infiniband-guid (refused) and ipam-claim-reference (ignored, as
// the spec tells implementations without IPAMClaims), and also reads
// Multus's old "interfaceRequest". Multus v4 reads one more key, deviceID,
// and ignores every other one (encoding/json), misspellings included: a pod
// whose "ipRequest" Multus ignored never had the address it asked for.
//
// Keys match as Multus's decoder matches them, in any letter case. A key
// set to null is not set (Multus reads it as empty).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// foreignKeys are the refused keys, in the order checked.
var foreignKeys = []struct {
	key string
	// spec is the NPWG key meant by a misspelling; "" for a key nri-cni
	// does not support (ErrUnsupportedField), whose why says why.
	spec, why string
}{
	{key: "deviceID", why: "Multus's own key, not the NPWG spec's: it hands the plugin a host device the pod picks " +
		"(the deviceID capability, e.g. an SR-IOV VF's PCI address). With nri-cni a network's device is one the kubelet " +
		"allocated to the pod, never the pod's word: request the device plugin resource the NetworkAttachmentDefinition " +
		"names (k8s.v1.cni.cncf.io/resourceName) in a container's resources, and its device goes to the plugin " +
		"(docs/device-networks.md); or a DRA claim's device (docs/dra.md)"},
	{key: "infiniband-guid", why: "no InfiniBand support: the GUID is the infinibandGUID capability of an " +
		"InfiniBand plugin (ib-sriov); nri-cni passes no such capability, and dropping it would start the pod with " +
		"another GUID than it asked for"},
	{key: "infinibandGUID", why: `the CNI capability's name for the NPWG key "infiniband-guid", which nri-cni does not support either (no InfiniBand support)`},
	{key: "ipRequest", spec: "ips"},
	{key: "ipRequests", spec: "ips"},
	{key: "macRequest", spec: "mac"},
	{key: "interfaceName", spec: "interface"},
	{key: "gatewayRequest", spec: "default-route"},
	{key: "defaultRoute", spec: "default-route"},
	{key: "default_route", spec: "default-route"},
	{key: "cniArgs", spec: "cni-args"},
	{key: "cni_args", spec: "cni-args"},
	{key: "portMappingsRequest", spec: "portMappings"},
	{key: "bandwidthRequest", spec: "bandwidth"},
	{key: "ipamClaimReference", spec: KeyIPAMClaimReference},
}

// foreignKey returns why the element data (a JSON object) is refused for
// the first of foreignKeys it sets, or nil.
func foreignKey(data []byte) error {
	set := map[string]bool{} // lower-cased keys set to something
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if string(v) != "null" {
			set[strings.ToLower(key)] = true
		}
	}
	for _, f := range foreignKeys {
		if !set[strings.ToLower(f.key)] {
			continue
		}
		if f.spec == "" {
			return fmt.Errorf("key %q %w: %s", f.key, ErrUnsupportedField, f.why)
		}
		return fmt.Errorf("key %q is not a key of the NPWG spec, write %q (Multus ignores %q, so the pod never got "+
			"what it asked for there; nri-cni refuses it rather than drop it too)", f.key, f.spec, f.key)
	}
	return nil
}
