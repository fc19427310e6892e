package config

import (
	"fmt"
	"slices"
	"strings"
)

// CNI capabilities a pod can ask for with annotations (podCapabilities).
const (
	// CapabilityBandwidth: kubernetes.io/ingress-bandwidth and
	// kubernetes.io/egress-bandwidth, which the kubelet honours already.
	CapabilityBandwidth = "bandwidth"
	// CapabilityMAC: nri-cni.io/mac.
	CapabilityMAC = "mac"
	// CapabilityIPs: nri-cni.io/ips, any free address of the range (a
	// gateway's included).
	CapabilityIPs = "ips"
	// CapabilityPortMappings: nri-cni.io/port-mappings, a host port on the
	// node (what Pod Security's baseline level forbids through hostPort).
	CapabilityPortMappings = "portMappings"
)

// PodCapabilitiesKey is the config key of Config.PodCapabilities.
const PodCapabilitiesKey = "podCapabilities"

// KnownCapabilities returns every capability podCapabilities may list.
func KnownCapabilities() []string {
	return []string{CapabilityBandwidth, CapabilityMAC, CapabilityIPs, CapabilityPortMappings}
}

// DefaultPodCapabilities is bandwidth only: the other capabilities let a pod
// claim node resources (a host port, a chosen address) the admin grants.
func DefaultPodCapabilities() []string {
	return []string{CapabilityBandwidth}
}

func validatePodCapabilities(caps []string) error {
	known := KnownCapabilities()
	seen := map[string]bool{}
	for i, c := range caps {
		key := fmt.Sprintf("%s[%d]", PodCapabilitiesKey, i)
		if !slices.Contains(known, c) {
			return fmt.Errorf("%w: %s: %q is not a capability: want one of %s", ErrInvalid, key, c, strings.Join(known, ", "))
		}
		if seen[c] {
			return fmt.Errorf("%w: %s: %q listed twice", ErrInvalid, key, c)
		}
		seen[c] = true
	}
	return nil
}
