package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MultiNetworkPolicyConfig is kubernetes.multiNetworkPolicy: enforcement of
// MultiNetworkPolicy (k8s.cni.cncf.io/v1beta1) on the secondary interfaces
// nri-cni attaches, in each pod's netns, before the interface is created
// (docs/multinetworkpolicy.md). nri-cni-k8s only, as its whole section. Off
// unless enabled; it then needs deploy/multinetworkpolicy's RBAC and the CRD.
type MultiNetworkPolicyConfig struct {
	// Enabled turns enforcement on.
	Enabled bool `json:"enabled"`
	// AcceptICMP lets ICMPv4 through isolated chains (replies and errors
	// of allowed connections pass anyway).
	AcceptICMP bool `json:"acceptICMP"`
	// AcceptICMPv6 lets the rest of ICMPv6 through isolated chains;
	// neighbour discovery and MLD always pass.
	AcceptICMPv6 bool `json:"acceptICMPv6"`
	// Allow are node-wide allowances in every isolated chain of their
	// direction (e.g. DHCPv6 replies from fe80::/10).
	Allow []MNPAllow `json:"allow"`
	// PropagationDelay is the coalescing window of updates (10ms-1s; 0:
	// DefaultMNPPropagationDelay).
	PropagationDelay Duration `json:"propagationDelay"`
	// Limits bound what tenants' policies may cost (0 fields: defaults).
	Limits MNPLimits `json:"limits"`
}

// MNPAllow is one kubernetes.multiNetworkPolicy.allow entry.
type MNPAllow struct {
	// Direction is "ingress" or "egress".
	Direction string `json:"direction"`
	// Protocol is TCP, UDP or SCTP; empty: every protocol (then no ports).
	Protocol string `json:"protocol"`
	// Ports are destination ports or ranges ("546", "6000-6900", or a
	// number); empty: every port of Protocol.
	Ports []PortSpec `json:"ports"`
	// CIDRs restrict the peer's address (source on ingress, destination on
	// egress); empty: any address.
	CIDRs []string `json:"cidrs"`
}

// PortSpec is a port ("546" or 546) or an inclusive range ("6000-6900").
type PortSpec string

// UnmarshalJSON takes a string or a number.
func (p *PortSpec) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*p = PortSpec(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a port (546) or range (\"6000-6900\"), got %s", b)
	}
	*p = PortSpec(n.String())
	return nil
}

// Range parses the port or range: first <= last, both 1-65535.
func (p PortSpec) Range() (first, last uint16, err error) {
	a, b, isRange := strings.Cut(string(p), "-")
	if !isRange {
		b = a
	}
	lo, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 16)
	hi, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 16)
	if err1 != nil || err2 != nil || lo < 1 || hi < lo {
		return 0, 0, fmt.Errorf("%q is not a port (1-65535) or a range first-last", string(p))
	}
	return uint16(lo), uint16(hi), nil
}

// MNPLimits are kubernetes.multiNetworkPolicy.limits (design §5): counts
// checked before any work, past which a policy (or the namespace, for
// maxPoliciesPerNamespace) fails closed. 0 means the default.
type MNPLimits struct {
	MaxPoliciesPerNamespace int `json:"maxPoliciesPerNamespace"`
	MaxRulesPerPolicy       int `json:"maxRulesPerPolicy"`
	MaxPeersPerRule         int `json:"maxPeersPerRule"`
	MaxPortsPerRule         int `json:"maxPortsPerRule"`
	MaxExceptsPerIPBlock    int `json:"maxExceptsPerIPBlock"`
	MaxSelectorTerms        int `json:"maxSelectorTerms"`
	MaxValuesPerTerm        int `json:"maxValuesPerTerm"`
	MaxAddressesPerPod      int `json:"maxAddressesPerPod"`
	MaxRulesPerPod          int `json:"maxRulesPerPod"`
	// RenderBudget: selector evaluations per render of one pod.
	RenderBudget int `json:"renderBudget"`
}

// Defaults and bounds of kubernetes.multiNetworkPolicy.
const (
	DefaultMNPPropagationDelay = Duration(100 * time.Millisecond)
	minMNPPropagationDelay     = Duration(10 * time.Millisecond)
	maxMNPPropagationDelay     = Duration(time.Second)
	// maxMNPAllow bounds the allow entries (each is a rule in every
	// isolated chain).
	maxMNPAllow = 64
	// maxMNPAllowItems bounds an entry's ports and cidrs.
	maxMNPAllowItems = 64
)

// mnpLimit is one limits key: its default and the largest value accepted.
type mnpLimit struct {
	key      string
	field    func(*MNPLimits) *int
	def, max int
}

// mnpLimits lists the limits keys in the struct's order. The maxima keep an
// admin's typo from lifting a bound by orders of magnitude.
var mnpLimits = []mnpLimit{
	{"maxPoliciesPerNamespace", func(l *MNPLimits) *int { return &l.MaxPoliciesPerNamespace }, 128, 4096},
	{"maxRulesPerPolicy", func(l *MNPLimits) *int { return &l.MaxRulesPerPolicy }, 64, 1024},
	{"maxPeersPerRule", func(l *MNPLimits) *int { return &l.MaxPeersPerRule }, 64, 1024},
	{"maxPortsPerRule", func(l *MNPLimits) *int { return &l.MaxPortsPerRule }, 64, 1024},
	{"maxExceptsPerIPBlock", func(l *MNPLimits) *int { return &l.MaxExceptsPerIPBlock }, 64, 1024},
	{"maxSelectorTerms", func(l *MNPLimits) *int { return &l.MaxSelectorTerms }, 32, 256},
	{"maxValuesPerTerm", func(l *MNPLimits) *int { return &l.MaxValuesPerTerm }, 64, 1024},
	{"maxAddressesPerPod", func(l *MNPLimits) *int { return &l.MaxAddressesPerPod }, 16384, 1 << 20},
	{"maxRulesPerPod", func(l *MNPLimits) *int { return &l.MaxRulesPerPod }, 4096, 1 << 16},
	{"renderBudget", func(l *MNPLimits) *int { return &l.RenderBudget }, 1000000, 100000000},
}

// DefaultMNPLimits returns every limit at its default.
func DefaultMNPLimits() MNPLimits {
	var l MNPLimits
	for _, m := range mnpLimits {
		*m.field(&l) = m.def
	}
	return l
}

// MNPOn reports whether MultiNetworkPolicy is enforced.
func (k *KubernetesConfig) MNPOn() bool {
	return k != nil && k.MultiNetworkPolicy != nil && k.MultiNetworkPolicy.Enabled
}

// Delay returns PropagationDelay or its default.
func (m *MultiNetworkPolicyConfig) Delay() time.Duration {
	if m == nil || m.PropagationDelay == 0 {
		return DefaultMNPPropagationDelay.D()
	}
	return m.PropagationDelay.D()
}

// EffectiveLimits returns Limits with every 0 replaced by its default.
func (m *MultiNetworkPolicyConfig) EffectiveLimits() MNPLimits {
	var l MNPLimits
	if m != nil {
		l = m.Limits
	}
	for _, d := range mnpLimits {
		if f := d.field(&l); *f == 0 {
			*f = d.def
		}
	}
	return l
}

// MNPProtocols are the protocols an allow entry may name.
var MNPProtocols = []string{"TCP", "UDP", "SCTP"}

func (m *MultiNetworkPolicyConfig) validate() error {
	if m == nil {
		return nil
	}
	const prefix = "kubernetes.multiNetworkPolicy."
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: %s%s: %s", ErrInvalid, prefix, key, fmt.Sprintf(format, args...))
	}
	if d := m.PropagationDelay; d != 0 && (d < minMNPPropagationDelay || d > maxMNPPropagationDelay) {
		return bad("propagationDelay", "%s must be between %s and %s (0: %s)", d.D(), minMNPPropagationDelay.D(),
			maxMNPPropagationDelay.D(), DefaultMNPPropagationDelay.D())
	}
	for _, d := range mnpLimits {
		if v := *d.field(&m.Limits); v < 0 || v > d.max {
			return bad("limits."+d.key, "%d must be between 1 and %d (0: %d)", v, d.max, d.def)
		}
	}
	if len(m.Allow) > maxMNPAllow {
		return bad("allow", "%d entries, at most %d", len(m.Allow), maxMNPAllow)
	}
	for i, a := range m.Allow {
		if err := a.validate(); err != nil {
			return fmt.Errorf("%w: %sallow[%d].%w", ErrInvalid, prefix, i, err)
		}
	}
	return nil
}

// validate returns "<key>: <problem>" (the caller adds the prefix).
func (a MNPAllow) validate() error {
	switch a.Direction {
	case "ingress", "egress":
	default:
		return fmt.Errorf("direction: %q: want ingress or egress", a.Direction)
	}
	if a.Protocol != "" && !slices.Contains(MNPProtocols, a.Protocol) {
		return fmt.Errorf("protocol: %q: want TCP, UDP, SCTP or empty (every protocol)", a.Protocol)
	}
	if len(a.Ports) > maxMNPAllowItems {
		return fmt.Errorf("ports: %d entries, at most %d", len(a.Ports), maxMNPAllowItems)
	}
	if len(a.Ports) > 0 && a.Protocol == "" {
		return fmt.Errorf("ports: need a protocol (TCP, UDP or SCTP)")
	}
	for i, p := range a.Ports {
		if _, _, err := p.Range(); err != nil {
			return fmt.Errorf("ports[%d]: %w", i, err)
		}
	}
	if len(a.CIDRs) > maxMNPAllowItems {
		return fmt.Errorf("cidrs: %d entries, at most %d", len(a.CIDRs), maxMNPAllowItems)
	}
	for i, c := range a.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("cidrs[%d]: %q is not a CIDR", i, c)
		}
		if p != p.Masked() {
			return fmt.Errorf("cidrs[%d]: %q has host bits set (did you mean %s?)", i, c, p.Masked())
		}
	}
	return nil
}
