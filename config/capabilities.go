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
	// CapabilitySysctl: interface sysctls chosen by the pod (the tuning
	// plugin's cni-args key "sysctl"; proxy_arp on a shared L2 reaches every
	// pod on it). No annotation and no CNI runtimeConfig: it gates cni-args.
	CapabilitySysctl = "sysctl"
)

// PodCNIArgsKey is the config key of Config.PodCNIArgs.
const PodCNIArgsKey = "podCNIArgs"

// CNIArgCapabilities maps the cni-args keys the reference plugins read as
// a capability (host-local and static: ips; tuning: mac, sysctl) to that
// capability: a pod passing one needs it in podCapabilities too.
func CNIArgCapabilities() map[string]string {
	return map[string]string{"ips": CapabilityIPs, "mac": CapabilityMAC, "sysctl": CapabilitySysctl}
}

// PodCapabilitiesKey is the config key of Config.PodCapabilities.
const PodCapabilitiesKey = "podCapabilities"

// KnownCapabilities returns every capability podCapabilities may list.
func KnownCapabilities() []string {
	return []string{CapabilityBandwidth, CapabilityMAC, CapabilityIPs, CapabilityPortMappings, CapabilitySysctl}
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

// validatePodCNIArgs checks podCNIArgs: plain keys, each listed once, and
// the keys that mean a capability allowed only with that capability.
func validatePodCNIArgs(keys, caps []string) error {
	seen := map[string]bool{}
	for i, k := range keys {
		key := fmt.Sprintf("%s[%d]", PodCNIArgsKey, i)
		if k == "" || len(k) > 63 || strings.ContainsAny(k, " \t\n\"\\/") {
			return fmt.Errorf("%w: %s: %q is not a cni-args key", ErrInvalid, key, k)
		}
		if seen[k] {
			return fmt.Errorf("%w: %s: %q listed twice", ErrInvalid, key, k)
		}
		seen[k] = true
		if c, ok := CNIArgCapabilities()[k]; ok && !slices.Contains(caps, c) {
			return fmt.Errorf("%w: %s: cni-args key %q is the %q capability: list %q in %s too", ErrInvalid, key, k, c, c, PodCapabilitiesKey)
		}
	}
	return nil
}
