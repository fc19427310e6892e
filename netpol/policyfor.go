package netpol

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxPolicyForEntries bounds the networks one policy-for annotation may name.
const maxPolicyForEntries = 32

// netRef is one parsed policy-for entry: "ns/name", or a bare "name" (Bare)
// whose Namespace is the policy's.
type netRef struct {
	Namespace, Name string
	Bare            bool
	// nad is "Namespace/Name", as a NAD identity spells it.
	nad string
}

// networks is the set of networks a policy applies to.
type networks []netRef

// parsePolicyFor parses a policy-for annotation the way
// multi-networkpolicy-nftables does (split on ",", trim each entry and each
// side of "/", skip empty entries), and in addition requires the namespace
// to be a DNS label and the name a DNS subdomain. Invalid entries and those
// past the 32nd are skipped, each with a message naming it; an annotation
// with no valid entry applies to nothing.
func parsePolicyFor(raw, policyNS string) (networks, []string) {
	var out networks
	var bad []string
	seen := map[netRef]bool{}
	for i, entry := range strings.Split(raw, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		ref, err := parseNetRef(entry, policyNS)
		if err != nil {
			bad = append(bad, fmt.Sprintf("entry %d %q: %v", i, entry, err))
			continue
		}
		if seen[ref] {
			continue
		}
		if len(out) == maxPolicyForEntries {
			bad = append(bad, fmt.Sprintf("entry %d %q: more than %d networks, skipped", i, entry, maxPolicyForEntries))
			continue
		}
		seen[ref] = true
		out = append(out, ref)
	}
	return out, bad
}

func parseNetRef(entry, policyNS string) (netRef, error) {
	parts := strings.Split(entry, "/")
	switch len(parts) {
	case 1:
		name := strings.TrimSpace(parts[0])
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return netRef{}, fmt.Errorf("name: %s", errs[0])
		}
		return netRef{Namespace: policyNS, Name: name, Bare: true, nad: policyNS + "/" + name}, nil
	case 2:
		ns, name := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return netRef{}, fmt.Errorf("namespace: %s", errs[0])
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return netRef{}, fmt.Errorf("name: %s", errs[0])
		}
		return netRef{Namespace: ns, Name: name, nad: ns + "/" + name}, nil
	}
	return netRef{}, fmt.Errorf("more than one \"/\"")
}

// matches says whether an attachment's identity is one of the networks: a
// NAD "ns/name" matches the entry "ns/name" (or "name" in the policy's
// namespace ns); a node network matches a bare entry of its name.
func (n networks) matches(id Identity) bool {
	for _, r := range n {
		if id.NAD != "" && id.NAD == r.nad {
			return true
		}
		if id.NAD == "" && r.Bare && id.Node != "" && id.Node == r.Name {
			return true
		}
	}
	return false
}

// MatchesPolicyFor says whether an attachment of identity id is covered by a
// policy of namespace policyNS with the policy-for annotation raw. Front
// ends use it to find the pods a policy change affects.
func MatchesPolicyFor(raw, policyNS string, id Identity) bool {
	n, _ := parsePolicyFor(raw, policyNS)
	return n.matches(id)
}
