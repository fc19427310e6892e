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
)

// PolicyForAnnotation names the networks a MultiNetworkPolicy applies to
// (upstream's k8s.v1.cni.cncf.io/policy-for): a comma-separated list of
// "namespace/name" or "name" (the policy's namespace).
const PolicyForAnnotation = "k8s.v1.cni.cncf.io/policy-for"

// FormatVersion is part of every digest: a change of the rendering or of the
// programmed shape bumps it, so an upgrade reprograms every pod once.
const FormatVersion = 1

// Identity names the network an interface is attached to, as policy-for
// entries and peers' network-status name it. Exactly one field is set.
type Identity struct {
	// NAD is "namespace/name" of a NetworkAttachmentDefinition.
	NAD string
	// Node is the name of a network in the node's confDir (no NAD).
	Node string
}

func (i Identity) String() string {
	if i.NAD != "" {
		return i.NAD
	}
	return i.Node
}

// Protocol is an L4 protocol of a policy port.
type Protocol uint8

const (
	ProtoAny    Protocol = 0
	ProtoICMP   Protocol = 1
	ProtoTCP    Protocol = 6
	ProtoUDP    Protocol = 17
	ProtoICMPv6 Protocol = 58
	ProtoSCTP   Protocol = 132
)

// NamedPort is a container port with a name (spec.containers[].ports).
type NamedPort struct {
	Name     string
	Protocol Protocol
	Port     uint16
}

// Interface is one secondary interface nri-cni attached (or is about to).
type Interface struct {
	IfName   string
	Identity Identity
	// IPs are the interface's own addresses; empty before the CNI ADD.
	IPs []netip.Addr
}

// Target is the pod whose rules are rendered.
type Target struct {
	Namespace string
	Name      string
	UID       string
	Labels    map[string]string
	// NamedPorts of the pod's containers; nil when not known yet (they
	// resolve to nothing, which only restricts).
	NamedPorts []NamedPort
	Interfaces []Interface
}

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

// Direction of a chain: traffic into the pod (ingress) or out of it.
type Direction uint8

const (
	Ingress Direction = iota + 1
	Egress
)

func (d Direction) String() string {
	switch d {
	case Ingress:
		return "ingress"
	case Egress:
		return "egress"
	}
	return "unknown"
}

// Family of a rule's addresses; FamilyAny matches both.
type Family uint8

const (
	FamilyAny Family = iota
	IPv4
	IPv6
)

// Verdict of a rule.
type Verdict uint8

const (
	Accept Verdict = iota + 1
	Drop
)

// PortRange is an inclusive range of L4 destination ports.
type PortRange struct {
	First, Last uint16
}

// AddrPort is one (address, protocol, port) triple: an egress rule to a
// named port resolves per destination pod.
type AddrPort struct {
	Addr     netip.Addr
	Protocol Protocol
	Port     uint16
}

// Rule matches packets of one chain; all its set fields must match (AND).
// A zero field matches anything. The first rule that matches decides.
type Rule struct {
	// Established matches conntrack state established or related only.
	Established bool
	Family      Family
	// Addrs: the peer's address (source on ingress, destination on
	// egress) is inside one of these prefixes. Sorted, non-overlapping,
	// all of Family when Family is set. Nil matches any address; a rule
	// whose peers resolve to no address is not emitted.
	Addrs []netip.Prefix
	// Protocol and Ports: Ports needs Protocol TCP, UDP or SCTP. Nil
	// Ports matches every port of Protocol.
	Protocol Protocol
	Ports    []PortRange
	// ICMPTypes (Protocol ICMP or ICMPv6): the message type is one of these.
	ICMPTypes []uint8
	// AddrPorts: (peer address, protocol, destination port) is one of
	// these; used alone (no Addrs, Protocol or Ports).
	AddrPorts []AddrPort
	Verdict   Verdict
	// Comment says where the rule comes from, e.g. "ns/policy ingress[0]".
	Comment string
}

// Chain holds the rules of one (interface, direction). A packet of that
// interface and direction that no rule accepts is dropped: every chain
// ends in an explicit Drop rule.
type Chain struct {
	IfName    string
	Direction Direction
	Rules     []Rule
}

// Ruleset is everything one pod's table holds. An empty Ruleset (no
// chains) means no interface of the pod is isolated: no table at all.
type Ruleset struct {
	// Chains sorted by IfName, then Direction.
	Chains []Chain
	// Digest identifies the content (FormatVersion included); equal
	// digests mean equal programmed state.
	Digest string
}

// Empty says whether nothing is isolated.
func (r Ruleset) Empty() bool { return len(r.Chains) == 0 }

// Note is something an operator should hear about a policy: an invalid
// part (which allows nothing) or a cap that was hit (deny-all).
type Note struct {
	Namespace string
	Policy    string
	// Reason is a CamelCase word for Events: Invalid, Oversize, CapExceeded,
	// BudgetExceeded, NotSynced.
	Reason  string
	Message string
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
