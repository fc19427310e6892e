package config

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"sort"
)

// NADPolicy is kubernetes.nadPolicy: what a NetworkAttachmentDefinition's
// spec.config may reach on the node. Whoever may create a NAD in a
// namespace chooses the CNI plugins nri-cni runs as root for the pods that
// name it, so every host resource a config can name (plugin types, bridges,
// uplinks, devices, address ranges, host paths, gateway/NAT rules,
// runtimeConfig) is refused unless the rule of the NAD's namespace allows it.
// Package nadpolicy enforces it on the node and renders the matching
// ValidatingAdmissionPolicy.
type NADPolicy struct {
	// Default is the rule of every namespace not in Namespaces; nil means
	// DefaultNADRule().
	Default *NADRule `json:"default"`
	// Namespaces: a namespace listed here gets exactly its own rule instead
	// of Default (nothing is inherited).
	Namespaces map[string]NADRule `json:"namespaces"`
}

// NADRule is one namespace's (or the default) rule. Empty lists and false
// allow nothing.
type NADRule struct {
	// Types: every "type" value anywhere in spec.config (plugins, ipam,
	// nested objects) must be one of these.
	Types []string `json:"types"`
	// Bridges: patterns ('*', '?') every "bridge" value must match; a
	// plugin of type bridge must name its bridge (the plugin's default is
	// cni0).
	Bridges []string `json:"bridges"`
	// Masters: patterns every "master" value must match; plugins of type
	// macvlan, ipvlan and vlan must name one (their default is the node's
	// default-route interface).
	Masters []string `json:"masters"`
	// Devices: patterns every "device" value (host-device) must match;
	// pciBusID, hwaddr, kernelpath and deviceID are always refused.
	Devices []string `json:"devices"`
	// IPAMRanges: CIDRs every address value (subnet, range, rangeStart,
	// rangeEnd, range_start, range_end, gateway, address, each of "ips")
	// must lie inside.
	IPAMRanges []string `json:"ipamRanges"`
	// Paths: absolute path prefixes every string starting with "/" must be
	// at or under; keys ending in dir, path, file or socket must hold such
	// a path. ".." segments are always refused.
	Paths []string `json:"paths"`
	// HostGateway allows isGateway, isDefaultGateway and ipMasq set to true
	// (the host on the tenant's L2, NAT rules on the host).
	HostGateway bool `json:"hostGateway"`
	// RuntimeConfig allows a "runtimeConfig" key (a static one bypasses
	// podCapabilities).
	RuntimeConfig bool `json:"runtimeConfig"`
}

// Keys of the NAD policy and size limit, for messages.
const (
	NADPolicyKey         = "kubernetes.nadPolicy"
	MaxNADConfigBytesKey = "kubernetes.maxNADConfigBytes"
	MaxNADCacheBytesKey  = "kubernetes.maxNADCacheBytes"
)

// DefaultMaxNADConfigBytes bounds a NAD's spec.config. The largest real
// conflists (bridge + tuning + bandwidth + portmap, IPAM with several
// ranges and routes) are 1-3 KiB; every node keeps every NAD of the
// cluster in its informer cache (the DaemonSet has 128 Mi), and the
// ValidatingAdmissionPolicy's regular expressions cost in proportion to the
// size, well inside the API server's CEL budget at 16 KiB.
const (
	DefaultMaxNADConfigBytes = 16 << 10
	minNADConfigBytes        = 1 << 10
	// maxNADConfigBytesLimit keeps the admission policy's CEL cost under
	// the API server's per-expression limit (1,000,000): measured, a 64 KiB
	// config of 500 bridge plugins exceeds it (the policy then fails
	// closed), 32 KiB configs of every shape tried stay under it.
	maxNADConfigBytesLimit = 32 << 10
)

// DefaultMaxNADCacheBytes bounds the NAD cache of each node (every NAD of
// the cluster, as kube.NADCost counts it: 2 KiB, its config three times and
// 320 bytes per JSON object in it, which covers the heap it takes with its
// parsed network). The DaemonSet has 128 Mi; nri-cni itself uses ~35 MiB
// with client-go, and Go's garbage collector lets the heap reach about
// twice what is live: 16 MiB live stays well inside. That is ~4,400 NADs
// of a small conflist, or ~330 of the largest default config.
const (
	DefaultMaxNADCacheBytes = 16 << 20
	minNADCacheBytes        = 1 << 20
	maxNADCacheBytesLimit   = 1 << 30
)

// DefaultNADTypes are the plugin types the code default allows: none of
// them reaches a host resource unless another key names one.
func DefaultNADTypes() []string {
	return []string{"bridge", "macvlan", "ipvlan", "host-local", "static", "tuning", "bandwidth", "sbr", "vrf"}
}

// DefaultNADRule is the rule used when nadPolicy (or its default) is not
// set: the default types, no host resource.
func DefaultNADRule() NADRule {
	return NADRule{Types: DefaultNADTypes(), Bridges: []string{}, Masters: []string{}, Devices: []string{},
		IPAMRanges: []string{}, Paths: []string{}}
}

// DefaultNADPolicy is the fail-closed policy of Kubernetes mode without
// kubernetes.nadPolicy.
func DefaultNADPolicy() *NADPolicy {
	r := DefaultNADRule()
	return &NADPolicy{Default: &r, Namespaces: map[string]NADRule{}}
}

// NADPolicyOrDefault returns kubernetes.nadPolicy with its defaults filled
// in (nil section or nil default: the code default).
func (k *KubernetesConfig) NADPolicyOrDefault() *NADPolicy {
	if k == nil || k.NADPolicy == nil {
		return DefaultNADPolicy()
	}
	return k.NADPolicy.Normalized()
}

// NADConfigLimit returns maxNADConfigBytes or its default.
func (k *KubernetesConfig) NADConfigLimit() int {
	if k == nil || k.MaxNADConfigBytes == 0 {
		return DefaultMaxNADConfigBytes
	}
	return k.MaxNADConfigBytes
}

// NADCacheLimit returns maxNADCacheBytes or its default.
func (k *KubernetesConfig) NADCacheLimit() int {
	if k == nil || k.MaxNADCacheBytes == 0 {
		return DefaultMaxNADCacheBytes
	}
	return k.MaxNADCacheBytes
}

// Normalized returns a copy with Default filled in and every nil list or
// map empty, so it marshals the same whichever way it was written.
func (p *NADPolicy) Normalized() *NADPolicy {
	if p == nil {
		return DefaultNADPolicy()
	}
	out := &NADPolicy{Namespaces: map[string]NADRule{}}
	def := DefaultNADRule()
	if p.Default != nil {
		def = p.Default.normalized()
	}
	out.Default = &def
	for ns, r := range p.Namespaces {
		out.Namespaces[ns] = r.normalized()
	}
	return out
}

func (r NADRule) normalized() NADRule {
	empty := func(s []string) []string {
		out := make([]string, len(s))
		copy(out, s)
		return out
	}
	return NADRule{Types: empty(r.Types), Bridges: empty(r.Bridges), Masters: empty(r.Masters),
		Devices: empty(r.Devices), IPAMRanges: empty(r.IPAMRanges), Paths: empty(r.Paths),
		HostGateway: r.HostGateway, RuntimeConfig: r.RuntimeConfig}
}

// Rule returns the rule for namespace ns and its key
// ("kubernetes.nadPolicy.default" or "kubernetes.nadPolicy.namespaces.<ns>").
func (p *NADPolicy) Rule(ns string) (string, NADRule) {
	p = p.Normalized()
	if r, ok := p.Namespaces[ns]; ok {
		return NADPolicyKey + ".namespaces." + ns, r
	}
	return NADPolicyKey + ".default", *p.Default
}

// SortedNamespaces lists the namespaces with their own rule, sorted.
func (p *NADPolicy) SortedNamespaces() []string {
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(p.Namespaces))
	for ns := range p.Namespaces {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

var (
	// pluginTypeRe: a CNI plugin binary name (no path).
	pluginTypeRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
	// ifnamePatternRe: interface-name characters plus the wildcards.
	ifnamePatternRe = regexp.MustCompile(`^[a-zA-Z0-9_.\-*?]+$`)
	// pathPrefixRe: characters a path prefix may use (none that needs
	// quoting in a CEL raw string or JSON).
	pathPrefixRe = regexp.MustCompile(`^/[a-zA-Z0-9_.\-+@/=:,]*$`)
)

func (p *NADPolicy) validate(prefix string) error {
	if p == nil {
		return nil
	}
	if p.Default != nil {
		if err := p.Default.validate(prefix+".default", false); err != nil {
			return err
		}
	}
	for _, ns := range p.SortedNamespaces() {
		key := prefix + ".namespaces." + ns
		if !validNamespace(ns) {
			return fmt.Errorf("%w: %s: %q is not a Kubernetes namespace name", ErrInvalid, key, ns)
		}
		if err := p.Namespaces[ns].validate(key, true); err != nil {
			return err
		}
	}
	return nil
}

// validate checks one rule; key is its full key. A namespace rule must say
// its types: it replaces default entirely, so a forgotten list would
// silently refuse every NAD of the namespace.
func (r NADRule) validate(key string, namespaced bool) error {
	bad := func(sub string, i int, format string, args ...any) error {
		k := key + "." + sub
		if i >= 0 {
			k = fmt.Sprintf("%s[%d]", k, i)
		}
		return fmt.Errorf("%w: %s: %s", ErrInvalid, k, fmt.Sprintf(format, args...))
	}
	if namespaced && r.Types == nil {
		return bad("types", -1, "missing: a namespace rule replaces default entirely; list the plugin types (or [] to refuse every NAD with a config)")
	}
	lists := []struct {
		name  string
		list  []string
		check func(string) string
	}{
		{"types", r.Types, func(s string) string {
			if !pluginTypeRe.MatchString(s) {
				return "is not a CNI plugin type (letters, digits, '_', '.', '-')"
			}
			return ""
		}},
		{"bridges", r.Bridges, checkIfnamePattern},
		{"masters", r.Masters, checkIfnamePattern},
		{"devices", r.Devices, checkIfnamePattern},
		{"ipamRanges", r.IPAMRanges, checkRange},
		{"paths", r.Paths, checkPathPrefix},
	}
	for _, l := range lists {
		seen := map[string]bool{}
		for i, s := range l.list {
			if msg := l.check(s); msg != "" {
				return bad(l.name, i, "%q %s", s, msg)
			}
			if seen[s] {
				return bad(l.name, i, "%q listed twice", s)
			}
			seen[s] = true
		}
	}
	return nil
}

func checkIfnamePattern(s string) string {
	if len(s) > maxIfnameLen || !ifnamePatternRe.MatchString(s) {
		return fmt.Sprintf("is not an interface-name pattern (1-%d of letters, digits, '_', '.', '-', and the wildcards '*', '?')", maxIfnameLen)
	}
	return ""
}

func checkRange(s string) string {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return "is not a CIDR"
	case p.Addr().Is4In6():
		return "is an IPv4-mapped IPv6 CIDR: write the IPv4 CIDR"
	case p != p.Masked():
		return fmt.Sprintf("has host bits set: write %s", p.Masked())
	}
	return ""
}

func checkPathPrefix(s string) string {
	switch {
	case !pathPrefixRe.MatchString(s):
		return "is not an absolute path (letters, digits and _ . - + @ / = : , only)"
	case s == "/":
		return `would allow every host path`
	case path.Clean(s) != s:
		return fmt.Sprintf("is not a clean path: write %q", path.Clean(s))
	}
	return ""
}

func (k *KubernetesConfig) validateNAD() error {
	if n := k.MaxNADConfigBytes; n != 0 && (n < minNADConfigBytes || n > maxNADConfigBytesLimit) {
		return fmt.Errorf("%w: %s: %d must be between %d and %d (0: %d)", ErrInvalid, MaxNADConfigBytesKey, n,
			minNADConfigBytes, maxNADConfigBytesLimit, DefaultMaxNADConfigBytes)
	}
	if n := k.MaxNADCacheBytes; n != 0 && (n < minNADCacheBytes || n > maxNADCacheBytesLimit) {
		return fmt.Errorf("%w: %s: %d must be between %d (1 MiB) and %d (1 GiB) (0: %d)", ErrInvalid, MaxNADCacheBytesKey, n,
			minNADCacheBytes, maxNADCacheBytesLimit, DefaultMaxNADCacheBytes)
	}
	return k.NADPolicy.validate(NADPolicyKey)
}
