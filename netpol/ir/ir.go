// Package ir holds what a MultiNetworkPolicy rendering produces and what
// its consumers pass around: the pod (Target, Interface, Identity) and the
// rules (Ruleset, Chain, Rule), with their canonical digest and text. It
// imports no Kubernetes API types, so the layers below the renderer (attach,
// nft) and the hook-mode binary stay free of them; package netpol renders,
// and re-exports these names.
package ir

import "net/netip"

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

// Closed is rs with every chain reduced to its final Drop: the same
// interfaces and directions, nothing allowed (not even replies: there are
// none before the interface exists). An attach programs it before the
// first ADD, so every interface is born closed, and replaces it with rs
// while the ADDs run; a packet dropped meanwhile leaves no conntrack entry
// (it is never confirmed), so nothing admitted then outlives the swap.
func Closed(rs Ruleset) Ruleset {
	if rs.Empty() {
		return Ruleset{}
	}
	out := Ruleset{Chains: make([]Chain, 0, len(rs.Chains))}
	for _, c := range rs.Chains {
		out.Chains = append(out.Chains, Chain{IfName: c.IfName, Direction: c.Direction,
			Rules: []Rule{{Verdict: Drop, Comment: "closed until the attach completes"}}})
	}
	return Seal(out)
}
