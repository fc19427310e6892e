package plan

// Resolving the NPWG annotation into attachments: namespace isolation, the
// podCapabilities gate, the NetworkAttachmentDefinition cache, capability
// declaration and cni-args. Everything here reads memory only (the source's
// cache and the loaded configs): no API call, no file read.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nri-cni/nri-cni/cni"
)

// Errors of NPWG selections (each wrapped with the element and reference).
var (
	// ErrNamespaceNotAllowed: the pod names a NetworkAttachmentDefinition
	// of another namespace that kubernetes.sharedNamespaces does not list.
	ErrNamespaceNotAllowed = errors.New("NetworkAttachmentDefinition namespace not allowed")
	// ErrCapabilityNotDeclared: the element asks for a capability no plugin
	// of the network declares; the NPWG spec asks to fail rather than drop it.
	ErrCapabilityNotDeclared = errors.New("capability not declared by any plugin of the network")
	// ErrBothAnnotations: a pod with both nri-cni.io/networks and the NPWG
	// annotation (with both honoured) is refused: neither silently wins.
	ErrBothAnnotations = errors.New("both " + AnnotationNetworks + " and " + AnnotationNPWGNetworks + " are set; use one")
	// ErrOutOfTime: the runtime's request deadline came before the work
	// was done.
	ErrOutOfTime = errors.New("out of time: the runtime's request deadline passed")
)

// npwg turns the annotation's value into attachments for a pod of
// podNamespace, with the notes of what it ignored. The default networks
// come first: they count against the limit, and the elements are numbered
// after them.
func (p *Planner) npwg(ctx context.Context, podNamespace, value string, defaults []Attachment) ([]Attachment, []Note, error) {
	sels, err := ParseNPWGNetworks(value, podNamespace, p.cfg.Limits.MaxNetworksPerPod-len(defaults))
	if err != nil {
		return nil, nil, withDefaults(err, len(defaults))
	}
	atts := make([]Attachment, 0, len(sels))
	reserved := reservedNames(defaults)
	taken := map[string]int{} // interface name -> element index
	for i, sel := range sels {
		if ctx.Err() != nil {
			// Not ctx's error: containerd drops a plugin that returns
			// DeadlineExceeded.
			return nil, nil, fmt.Errorf("%w: planning %s stopped at element %d of %d", ErrOutOfTime, AnnotationNPWGNetworks, i+1, len(sels))
		}
		where := npwgWhere(i, sel)
		n, caps, err := p.resolveNAD(where, podNamespace, sel, cni.Owner{NAD: sel.Ref.String()})
		if err != nil {
			return nil, nil, err
		}
		// Named as Multus names them: an element without an interface gets
		// <ifnamePrefix><its position> ("a, b@eth1, c": net1, eth1, net3),
		// counted after the default networks (Multus's delegate index), so
		// pods keep their interface names when they move from Multus.
		ifname := sel.Interface
		if ifname == "" {
			ifname = p.cfg.Ifname(len(defaults) + i)
		}
		if d, ok := reserved[ifname]; ok {
			return nil, nil, fmt.Errorf("%w %s: %w: %q is %s's", ErrBadAnnotation, where, ErrBadInterface, ifname, d)
		}
		if prev, ok := taken[ifname]; ok {
			return nil, nil, fmt.Errorf("%w %s: %w: %q is also element %d's", ErrBadAnnotation, where, ErrBadInterface, ifname, prev+1)
		}
		taken[ifname] = i
		atts = append(atts, Attachment{Network: n, IfName: ifname, NAD: sel.Ref.String(), Caps: caps,
			Gateways: sel.DefaultRoute, Explicit: sel.Interface != ""})
	}
	var notes []Note
	for i, sel := range sels {
		notes = append(notes, sel.notes(npwgWhere(i, sel), atts[i])...)
	}
	return atts, notes, nil
}

// npwgWhere names the annotation's element i (0-based) in errors and notes.
func npwgWhere(i int, sel NetworkSelection) string {
	return fmt.Sprintf("%s element %d (%s)", AnnotationNPWGNetworks, i+1, sel.Ref)
}

// resolveNAD applies the gates of a selection of a NetworkAttachmentDefinition
// (namespace isolation, podCapabilities, declared capabilities, podCNIArgs)
// and returns its network, marked with owner and carrying the selection's
// cni-args, with the selection's capability args. where names the element
// in errors.
func (p *Planner) resolveNAD(where, podNamespace string, sel NetworkSelection, owner cni.Owner) (*cni.Network, map[string]any, error) {
	if sel.Ref.Namespace != podNamespace && !p.cfg.Kubernetes.SharesNamespace(sel.Ref.Namespace) {
		return nil, nil, fmt.Errorf("%s: %w: pods of namespace %q may use their own namespace's NetworkAttachmentDefinitions and those of kubernetes.sharedNamespaces %v",
			where, ErrNamespaceNotAllowed, podNamespace, p.sharedNamespaces())
	}
	if err := p.checkCaps(where, sel); err != nil {
		return nil, nil, err
	}
	n, err := p.cat.NADs.Network(sel.Ref)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: NetworkAttachmentDefinition %s: %w", where, sel.Ref, err)
	}
	if n, err = p.expand(n); err != nil {
		return nil, nil, fmt.Errorf("%s: NetworkAttachmentDefinition %s has an empty spec.config: %w", where, sel.Ref, err)
	}
	return p.finish(where, n, sel, owner)
}

// checkCaps: every capability the selection asks for is in podCapabilities.
func (p *Planner) checkCaps(where string, sel NetworkSelection) error {
	caps := sel.caps()
	for _, c := range slices.Sorted(maps.Keys(caps)) {
		if !p.podCaps.allowed[c] {
			return &CapabilityError{Annotation: fmt.Sprintf("%s key %q", where, npwgKeyOf(c)), Capability: c, Allowed: p.podCaps.list}
		}
	}
	return nil
}

// finish checks that n declares the selection's capabilities and that its
// cni-args are allowed, and returns n marked with owner and carrying them.
func (p *Planner) finish(where string, n *cni.Network, sel NetworkSelection, owner cni.Owner) (*cni.Network, map[string]any, error) {
	caps := sel.caps()
	for _, c := range slices.Sorted(maps.Keys(caps)) {
		if !n.Declares(c) {
			return nil, nil, fmt.Errorf("%s: %w: %q (key %q) by network %q; add \"capabilities\": {%q: true} to a plugin that supports it",
				where, ErrCapabilityNotDeclared, c, npwgKeyOf(c), n.Name, c)
		}
	}
	if err := checkCNIArgs(p.cfg.PodCNIArgs, p.podCaps, where, sel.CNIArgs); err != nil {
		return nil, nil, err
	}
	n, err := n.Owned(owner)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	if n, err = n.WithCNIArgs(sel.CNIArgs); err != nil {
		return nil, nil, fmt.Errorf("%s: \"cni-args\": %w", where, err)
	}
	return n, caps, nil
}

func (p *Planner) sharedNamespaces() []string {
	if p.cfg.Kubernetes == nil {
		return nil
	}
	return p.cfg.Kubernetes.SharedNamespaces
}
