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
	"github.com/nri-cni/nri-cni/config"
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
// podNamespace.
func (p *Planner) npwg(ctx context.Context, podNamespace, value string) ([]Attachment, error) {
	sels, err := ParseNPWGNetworks(value, podNamespace, p.cfg.Limits.MaxNetworksPerPod)
	if err != nil {
		return nil, err
	}
	atts := make([]Attachment, 0, len(sels))
	taken := map[string]bool{}
	for i, sel := range sels {
		if ctx.Err() != nil {
			// Not ctx's error: containerd drops a plugin that returns
			// DeadlineExceeded.
			return nil, fmt.Errorf("%w: planning %s stopped at element %d of %d", ErrOutOfTime, AnnotationNPWGNetworks, i+1, len(sels))
		}
		where := fmt.Sprintf("%s element %d (%s)", AnnotationNPWGNetworks, i+1, sel.Ref)
		if sel.Ref.Namespace != podNamespace && !p.cfg.Kubernetes.SharesNamespace(sel.Ref.Namespace) {
			return nil, fmt.Errorf("%s: %w: pods of namespace %q may use their own namespace's NetworkAttachmentDefinitions and those of kubernetes.sharedNamespaces %v",
				where, ErrNamespaceNotAllowed, podNamespace, p.sharedNamespaces())
		}
		caps := sel.caps()
		for _, c := range slices.Sorted(maps.Keys(caps)) {
			if !p.podCaps.allowed[c] {
				return nil, &CapabilityError{Annotation: fmt.Sprintf("%s key %q", where, selectionKey(c)), Capability: c, Allowed: p.podCaps.list}
			}
		}
		n, err := p.cat.NADs.Network(sel.Ref)
		if err != nil {
			return nil, fmt.Errorf("%s: NetworkAttachmentDefinition %s: %w", where, sel.Ref, err)
		}
		if n.List == nil { // empty spec.config: the confDir network of that name
			if n, err = p.Local(n.Name); err != nil {
				return nil, fmt.Errorf("%s: NetworkAttachmentDefinition %s has an empty spec.config: %w", where, sel.Ref, err)
			}
		}
		for _, c := range slices.Sorted(maps.Keys(caps)) {
			if !n.Declares(c) {
				return nil, fmt.Errorf("%s: %w: %q (key %q) by network %q; add \"capabilities\": {%q: true} to a plugin that supports it",
					where, ErrCapabilityNotDeclared, c, selectionKey(c), n.Name, c)
			}
		}
		if err := p.checkCNIArgs(where, sel.CNIArgs); err != nil {
			return nil, err
		}
		if n, err = n.Owned(cni.Owner{NAD: sel.Ref.String()}); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if n, err = n.WithCNIArgs(sel.CNIArgs); err != nil {
			return nil, fmt.Errorf("%s: \"cni-args\": %w", where, err)
		}
		if sel.Interface != "" {
			if taken[sel.Interface] {
				return nil, fmt.Errorf("%w %s: interface %q used twice", ErrBadAnnotation, where, sel.Interface)
			}
			taken[sel.Interface] = true
		}
		atts = append(atts, Attachment{Network: n, IfName: sel.Interface, NAD: sel.Ref.String(), Caps: caps,
			Gateways: sel.DefaultRoute, Explicit: sel.Interface != ""})
	}
	p.nameInterfaces(atts, taken)
	return atts, nil
}

// selectionKey is the selection element's key of capability c.
func selectionKey(c string) string {
	switch c {
	case config.CapabilityIPs:
		return "ips"
	case config.CapabilityMAC:
		return "mac"
	case config.CapabilityBandwidth:
		return "bandwidth"
	default:
		return c // portMappings
	}
}

func (p *Planner) sharedNamespaces() []string {
	if p.cfg.Kubernetes == nil {
		return nil
	}
	return p.cfg.Kubernetes.SharedNamespaces
}
