package plan

// The NPWG element's "cni-args": tenant-chosen keys copied into every
// plugin's args.cni. The reference plugins read some of them as the very
// powers podCapabilities gates (host-local and static: "ips"; tuning:
// "mac", "sysctl"), so they are off unless nri.conf's podCNIArgs lists the
// key, and a key that means a capability needs that capability too (config
// validation enforces that pairing) and a value of its form.

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/nri-cni/nri-cni/config"
)

// ErrCNIArgsNotAllowed: a pod passed a cni-args key podCNIArgs does not list.
var ErrCNIArgsNotAllowed = errors.New("cni-args key not allowed by " + config.PodCNIArgsKey)

// checkCNIArgs validates an element's cni-args against nri.conf's
// podCNIArgs (keys) and podCapabilities (caps) and the capability keys'
// forms. where names the element.
func checkCNIArgs(keys []string, caps podCapabilities, where string, args map[string]any) error {
	for _, k := range slices.Sorted(maps.Keys(args)) {
		if !slices.Contains(keys, k) {
			allowed := "none: cni-args are off"
			if len(keys) > 0 {
				allowed = strings.Join(keys, ", ")
			}
			return fmt.Errorf("%s: \"cni-args\" key %q: %w (allowed: %s)", where, k, ErrCNIArgsNotAllowed, allowed)
		}
		if c, ok := config.CNIArgCapabilities()[k]; ok {
			if !caps.allowed[c] {
				return &CapabilityError{Annotation: fmt.Sprintf("%s \"cni-args\" key %q", where, k), Capability: c, Allowed: caps.list}
			}
			if err := checkCapabilityArg(k, args[k]); err != nil {
				return fmt.Errorf("%w %s: \"cni-args\" key %q: %w", ErrBadAnnotation, where, k, err)
			}
		}
	}
	return nil
}

// checkCapabilityArg checks the form of a cni-args value that means a
// capability: ips a list of addresses (with or without prefix), mac a
// unicast MAC, sysctl an object of net.* sysctls to string values.
func checkCapabilityArg(key string, v any) error {
	switch key {
	case "ips":
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return errors.New("want a non-empty list of IP addresses")
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("%v is not an IP address", e)
			}
			if net.ParseIP(s) == nil {
				if _, _, err := net.ParseCIDR(s); err != nil {
					return fmt.Errorf("%q is not an IP address", s)
				}
			}
		}
	case "mac":
		s, ok := v.(string)
		if !ok {
			return errors.New("want a MAC address string")
		}
		if _, err := parseMAC(s); err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
	case "sysctl":
		obj, ok := v.(map[string]any)
		if !ok {
			return errors.New(`want an object of sysctls, e.g. {"net.ipv4.conf.IFNAME.arp_notify": "1"}`)
		}
		for name, val := range obj {
			if _, ok := val.(string); !ok {
				return fmt.Errorf("sysctl %q: want a string value", name)
			}
			if !strings.HasPrefix(name, "net.") || strings.ContainsAny(name, "/ ") || strings.Contains(name, "..") {
				return fmt.Errorf("sysctl %q: only net.* sysctls of the pod's interfaces", name)
			}
		}
	}
	return nil
}
