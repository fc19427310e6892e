// Package netpol renders MultiNetworkPolicy objects into the rules one pod
// needs on the secondary interfaces nri-cni attached to it. It is pure: no
// I/O, no clock, no logging. Its input is the pod (Target), a read-only view
// of the cluster (Snapshot) and the node's options; its output is a Ruleset,
// a value the nft package programs into the pod's netns and netpol/eval
// judges packets against in tests.
//
// A Ruleset never names a host interface and never touches the default
// network (eth0) or lo: only the interfaces listed in Target.Interfaces.
package netpol

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

// PolicyForAnnotation names the networks a MultiNetworkPolicy applies to
// (upstream's k8s.v1.cni.cncf.io/policy-for): a comma-separated list of
// "namespace/name" or "name" (the policy's namespace).
const PolicyForAnnotation = "k8s.v1.cni.cncf.io/policy-for"

// The rendering's output and the target's shape live in netpol/ir (no
// Kubernetes API types there); these names are the same types.
type (
	Identity  = ir.Identity
	Protocol  = ir.Protocol
	NamedPort = ir.NamedPort
	Interface = ir.Interface
	Target    = ir.Target
	Direction = ir.Direction
	Family    = ir.Family
	Verdict   = ir.Verdict
	PortRange = ir.PortRange
	AddrPort  = ir.AddrPort
	Rule      = ir.Rule
	Chain     = ir.Chain
	Ruleset   = ir.Ruleset
	Note      = ir.Note
)

// Re-exported constants of netpol/ir.
const (
	FormatVersion = ir.FormatVersion

	ProtoAny    = ir.ProtoAny
	ProtoICMP   = ir.ProtoICMP
	ProtoTCP    = ir.ProtoTCP
	ProtoUDP    = ir.ProtoUDP
	ProtoICMPv6 = ir.ProtoICMPv6
	ProtoSCTP   = ir.ProtoSCTP

	Ingress = ir.Ingress
	Egress  = ir.Egress

	FamilyAny = ir.FamilyAny
	IPv4      = ir.IPv4
	IPv6      = ir.IPv6

	Accept = ir.Accept
	Drop   = ir.Drop
)

// Policy is a MultiNetworkPolicy as the node's cache holds it.
type Policy struct {
	Namespace  string
	Name       string
	UID        string
	Generation int64
	// PolicyFor is the raw policy-for annotation ("" when absent).
	PolicyFor string
	// Spec is nil when Oversize.
	Spec *networkingv1.NetworkPolicySpec
	// Oversize: the object went past a count cap when cached. It selects
	// every pod of its namespace on its networks, in both directions, and
	// allows nothing (fail closed).
	Oversize bool
}

// Namespace is a namespace's name and labels.
type Namespace struct {
	Name   string
	Labels map[string]string
	// Truncated: labels went past the cap; the namespace then never
	// matches a namespaceSelector (a missing label could make NotIn match).
	Truncated bool
}

// Peer is a pod that other pods' policies may allow: not terminal, with
// addresses on at least one secondary network.
type Peer struct {
	Namespace string
	Name      string
	UID       string
	Labels    map[string]string
	// LabelsTruncated: never matches a podSelector (see Namespace.Truncated).
	LabelsTruncated bool
	NamedPorts      []NamedPort
	// Addrs per identity, from the peer's network-status (or, for this
	// node's pods, from nri-cni's records).
	Addrs map[Identity][]netip.Addr
}

// Snapshot is a consistent, read-only view of the cluster. Implementations
// never call the API server; every method answers from memory.
type Snapshot interface {
	// Version changes whenever anything the snapshot returns changes.
	Version() uint64
	// Synced is false until every cache the view is made of has synced.
	Synced() bool
	// Policies of a namespace, sorted by name.
	Policies(namespace string) []*Policy
	// Namespaces, sorted by name.
	Namespaces() []*Namespace
	// Peers of a namespace, sorted by name.
	Peers(namespace string) []*Peer
}

// Limits bound the work and the rules one pod's rendering may cause.
type Limits struct {
	MaxPoliciesPerNamespace int
	MaxRulesPerPolicy       int
	MaxPeersPerRule         int
	MaxPortsPerRule         int
	MaxExceptsPerIPBlock    int
	MaxSelectorTerms        int
	MaxValuesPerTerm        int
	MaxAddressesPerPod      int
	MaxRulesPerPod          int
	// RenderBudget: selector evaluations per Render call.
	RenderBudget int
}

// DefaultLimits are the documented defaults (docs/multinetworkpolicy.md).
func DefaultLimits() Limits {
	return Limits{
		MaxPoliciesPerNamespace: 128,
		MaxRulesPerPolicy:       64,
		MaxPeersPerRule:         64,
		MaxPortsPerRule:         64,
		MaxExceptsPerIPBlock:    64,
		MaxSelectorTerms:        32,
		MaxValuesPerTerm:        64,
		MaxAddressesPerPod:      16384,
		MaxRulesPerPod:          4096,
		RenderBudget:            1000000,
	}
}

// Allow is a node-wide allowance added to every isolated chain of its
// direction (nri.conf), e.g. DHCPv6 from fe80::/10.
type Allow struct {
	Direction Direction
	Protocol  Protocol
	Ports     []PortRange
	CIDRs     []netip.Prefix
}

// Options are the node's settings.
type Options struct {
	AcceptICMP   bool
	AcceptICMPv6 bool
	Allow        []Allow
	Limits       Limits
}
