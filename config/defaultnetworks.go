package config

// defaultNetworks: networks every pod nri-cni serves gets, added before the
// ones the pod asks for — what Multus's defaultNetworks are. The existing
// `networks` key keeps its meaning (what a pod without a networks annotation
// gets, or every pod without podSelection); defaultNetworks come on top of
// it, and of either annotation, and a pod cannot opt out of them.

import (
	"fmt"
	"strings"
)

// Keys of the default networks, for error messages.
const (
	DefaultNetworksKey        = "defaultNetworks"
	DefaultNetworksExcludeKey = "defaultNetworksExclude"
	AdminNamespacesKey        = "kubernetes.adminNamespaces"
)

// DefaultNetwork is one entry of defaultNetworks: a confDir network by its
// CNI name (Namespace empty), or a NetworkAttachmentDefinition.
type DefaultNetwork struct {
	Namespace, Name string
}

// NAD reports whether d names a NetworkAttachmentDefinition.
func (d DefaultNetwork) NAD() bool { return d.Namespace != "" }

func (d DefaultNetwork) String() string {
	if d.NAD() {
		return d.Namespace + "/" + d.Name
	}
	return d.Name
}

// ParseDefaultNetwork reads an entry: "name" (a confDir network's CNI
// name) or "namespace/name" (a NetworkAttachmentDefinition).
func ParseDefaultNetwork(s string) (DefaultNetwork, error) {
	ns, name, isNAD := strings.Cut(s, "/")
	if !isNAD {
		if !networkNameRe.MatchString(s) {
			return DefaultNetwork{}, fmt.Errorf("%q is not a valid CNI network name (or namespace/name of a NetworkAttachmentDefinition)", s)
		}
		return DefaultNetwork{Name: s}, nil
	}
	if !validNamespace(ns) {
		return DefaultNetwork{}, fmt.Errorf("%q: %q is not a Kubernetes namespace name", s, ns)
	}
	if !validObjectName(name) {
		return DefaultNetwork{}, fmt.Errorf("%q: %q is not a Kubernetes object name", s, name)
	}
	return DefaultNetwork{Namespace: ns, Name: name}, nil
}

// DefaultNetworksFor returns the default networks of a pod of namespace ns
// (nil in a namespace defaultNetworksExclude lists). The entries were
// checked by Validate.
func (c *Config) DefaultNetworksFor(ns string) []DefaultNetwork {
	if len(c.DefaultNetworks) == 0 {
		return nil
	}
	for _, x := range c.DefaultNetworksExclude {
		if x == ns {
			return nil
		}
	}
	out := make([]DefaultNetwork, 0, len(c.DefaultNetworks))
	for _, s := range c.DefaultNetworks {
		d, err := ParseDefaultNetwork(s)
		if err != nil {
			continue // refused by Validate
		}
		out = append(out, d)
	}
	return out
}

// validateDefaultNetworks: valid, distinct entries, none also in networks,
// NADs only with a kubernetes section; and room left within
// limits.maxNetworksPerPod for at least the networks the pod gets besides
// them (nri.conf's networks, at least one), so no pod fails for the
// config's sake.
func (c *Config) validateDefaultNetworks() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...))
	}
	inNetworks := map[string]bool{}
	for _, n := range c.Networks {
		inNetworks[n] = true
	}
	seen := map[string]bool{}
	for i, s := range c.DefaultNetworks {
		key := fmt.Sprintf("%s[%d]", DefaultNetworksKey, i)
		d, err := ParseDefaultNetwork(s)
		if err != nil {
			return bad(key, "%v", err)
		}
		if seen[s] {
			return bad(key, "network %q listed twice", s)
		}
		seen[s] = true
		if inNetworks[s] {
			return bad(key, "network %q is also in networks: every pod gets defaultNetworks already", s)
		}
		if d.NAD() && c.Kubernetes == nil {
			return bad(key, "%q names a NetworkAttachmentDefinition, which needs Kubernetes mode (a kubernetes: section); "+
				"a confDir network is named without a namespace", s)
		}
		// A default NAD is attached to every pod nri-cni serves: whoever
		// writes it chooses a network of every pod on the node, and can
		// fail them all (delete it, add a resourceName). Only a namespace
		// where admins alone write NADs may hold one.
		if d.NAD() && !c.Kubernetes.AdminNamespace(d.Namespace) {
			return bad(key, "%q names a NetworkAttachmentDefinition in namespace %q, which %s does not list (%q): "+
				"a default network is attached to every pod, so whoever may write NADs there would choose a network of "+
				"every pod on the node and could fail them all; keep default NADs in a namespace only cluster admins "+
				"write, and list it in %s only if no tenant may create or change NADs there",
				s, d.Namespace, AdminNamespacesKey, c.Kubernetes.Admins(), AdminNamespacesKey)
		}
	}
	if k := len(c.DefaultNetworks); k > 0 {
		besides := max(len(c.Networks), 1)
		// maxNetworksPerPod is at most 99: the interface names fit too.
		if k+besides > c.Limits.MaxNetworksPerPod {
			return bad(DefaultNetworksKey, "%d networks and at least %d more per pod (networks) exceed %s (%d): the limit counts them",
				k, besides, MaxNetworksPerPodKey, c.Limits.MaxNetworksPerPod)
		}
	}
	for i, ns := range c.DefaultNetworksExclude {
		if !validNamespace(ns) {
			return bad(fmt.Sprintf("%s[%d]", DefaultNetworksExcludeKey, i), "%q is not a Kubernetes namespace name", ns)
		}
	}
	return nil
}

// validObjectName: a DNS-1123 subdomain, as Kubernetes object names are.
func validObjectName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if !validNamespace(label) {
			return false
		}
	}
	return true
}
