package plan

// One table of the NPWG selection element's keys (spec v1.3, 4.1.2.1, and
// Multus's old "interfaceRequest"): what each becomes, whether a claim's
// NetworkConfig may set it, and which podCapabilities entry gates it. The
// parser's JSON fields (selectionElement), the NetworkConfig's keys, the
// capabilities an element hands its attachment and the docs table follow
// it (npwg_table_test.go holds each to it).

import "github.com/nri-cni/nri-cni/config"

// npwgKey is one key of the selection element.
type npwgKey struct {
	name string
	// capability is the CNI capability (runtimeConfig key) the value
	// becomes, gated by podCapabilities; "" for none.
	capability string
	// networkConfig: a claim's NetworkConfig may set the key (the device
	// is the network: no name or namespace).
	networkConfig bool
	// does says what nri-cni does with it (the docs table).
	does string
}

// npwgKeys are the element's keys, in the spec's order.
var npwgKeys = []npwgKey{
	{name: "name", does: "the NetworkAttachmentDefinition (or, with nri-cni.io/networks, the network) to attach"},
	{name: "namespace", does: "the NAD's namespace (default: the pod's); another namespace only if sharedNamespaces lists it"},
	{name: "ips", capability: config.CapabilityIPs, networkConfig: true, does: "runtimeConfig.ips of the attachment"},
	{name: "mac", capability: config.CapabilityMAC, networkConfig: true, does: "runtimeConfig.mac of the attachment"},
	{name: "interface", networkConfig: true, does: "the interface name in the pod (default: <ifnamePrefix><n>)"},
	{name: "interfaceRequest", does: "Multus's old name for interface (the annotation only)"},
	{name: "cni-args", networkConfig: true, does: "the plugins' args.cni, keys gated by podCNIArgs"},
	{name: "portMappings", capability: config.CapabilityPortMappings, networkConfig: true, does: "runtimeConfig.portMappings of the attachment"},
	{name: "bandwidth", capability: config.CapabilityBandwidth, networkConfig: true, does: "runtimeConfig.bandwidth of the attachment"},
	{name: "default-route", networkConfig: true, does: "the pod's default route(s) through this interface"},
	{name: KeyIPAMClaimReference, does: "ignored by the annotation (no IPAMClaims, as the spec says), refused by a NetworkConfig"},
	{name: "infiniband-guid", does: "refused: no InfiniBand support"},
}

// npwgCapability is the capability of element key name ("" none).
func npwgCapability(name string) string {
	for _, k := range npwgKeys {
		if k.name == name {
			return k.capability
		}
	}
	return ""
}

// npwgKeyOf is the element key whose value becomes capability c.
func npwgKeyOf(c string) string {
	for _, k := range npwgKeys {
		if k.capability == c {
			return k.name
		}
	}
	return c
}
