package plan

// Networks asked for by DRA ResourceClaims (driver nri-cni.io). The DRA
// driver records, when the kubelet prepares a claim, which device (one
// network each) every request got and the claim's NetworkConfig; planning
// turns those into attachments under the same gates as the NPWG annotation
// (namespace isolation, podCapabilities, declared capabilities, podCNIArgs,
// limits). Pure: the records come in with the Pod.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// ErrBadClaimConfig wraps every error of a claim's NetworkConfig; the
// message names the claim, the config and the key.
var ErrBadClaimConfig = errors.New("invalid NetworkConfig")

// ErrClaimNotAllowed: a claim the node will not attach (its namespace is
// filtered out, or it names a network it may not use).
var ErrClaimNotAllowed = errors.New("claim not allowed")

// ErrClaimRecordMissing: the kubelet holds a claim of the pod as prepared
// by nri-cni.io, and nri-cni has no readable record of it: without one the
// pod would start without the claim's network, and the kubelet does not
// prepare the claim again.
var ErrClaimRecordMissing = errors.New("no record of the prepared claim")

// ClaimRef identifies the claim device an attachment was asked for by.
type ClaimRef = state.ClaimRef

// ClaimConfig is one opaque config of a claim's allocation.
type ClaimConfig = state.ClaimConfig

// claim is a prepared claim's device with its NetworkConfig parsed.
type claim struct {
	Ref     ClaimRef
	Network string
	Config  NetworkSelection
}

// nad reports whether the claim's network is a NetworkAttachmentDefinition.
func (c claim) nad() (NADRef, bool) {
	ns, name, ok := strings.Cut(c.Network, "/")
	return NADRef{Namespace: ns, Name: name}, ok
}

// parseClaim parses d's configs under the limits.
func (p *Planner) parseClaim(d state.ClaimDevice) (claim, error) {
	if d.Unrecorded != "" && d.Unjudged != "" {
		return claim{}, fmt.Errorf("%s: %w: %s; nri-cni cannot read the kubelet's DRA checkpoint to judge it (%s), so the "+
			"pod does not start without it until the checkpoint can be read or the record is rebuilt, prepared again or "+
			"unprepared (docs/dra.md, \"A lost record fails the pod closed\")", unjudgedClaim(d.Ref), ErrClaimRecordMissing,
			d.Unrecorded, d.Unjudged)
	}
	if d.Unrecorded != "" {
		return claim{}, fmt.Errorf("ResourceClaim %s (uid %s): %w: %s; the kubelet's checkpoint holds it as prepared "+
			"by nri-cni.io and will not prepare it again, so the pod does not start without its network (nri-cni "+
			"rebuilds the record from the claim when it can; else delete the pod, so that its claim is made and "+
			"prepared again)", d.Ref, d.Ref.UID, ErrClaimRecordMissing, d.Unrecorded)
	}
	sel, err := ParseNetworkConfig(d.Ref.Where(), d.Configs, p.cfg.Limits.MaxAnnotationBytes)
	return claim{Ref: d.Ref, Network: d.Network, Config: sel}, err
}

// unjudgedClaim names the claim of a stand-in while the kubelet's
// checkpoint cannot be read: the claim, or only its UID when nothing names
// its namespace (an unreadable record no attachment record names).
func unjudgedClaim(r ClaimRef) string {
	if r.Namespace == "" {
		return fmt.Sprintf("a prepared claim (uid %s) whose pod nri-cni cannot name", r.UID)
	}
	return fmt.Sprintf("ResourceClaim %s (uid %s)", r, r.UID)
}

// placed drops the stand-ins of claims whose namespace is unknown (an
// unreadable record no attachment record names): in a namespace nri-cni
// does not serve, no claim was prepared (CheckClaim refuses it), so they
// are not its pods'.
func placed(devs []state.ClaimDevice) []state.ClaimDevice {
	var out []state.ClaimDevice
	for _, d := range devs {
		if d.Ref.Namespace != "" || d.Unrecorded == "" {
			out = append(out, d)
		}
	}
	return out
}

func source(c ClaimConfig) string {
	if c.FromClass {
		return "the DeviceClass's config"
	}
	return "the claim's config"
}

// CheckClaim applies planning's gates to a claim of a pod of its namespace
// without planning a pod: the DRA driver refuses, when the kubelet prepares
// it, a claim that could never attach, with the reason.
func (p *Planner) CheckClaim(d state.ClaimDevice) error {
	if !p.cfg.Namespaces.Allows(d.Ref.Namespace) {
		return fmt.Errorf("%s: %w: namespace %q is filtered out (config namespaces)", d.Ref.Where(), ErrClaimNotAllowed, d.Ref.Namespace)
	}
	c, err := p.parseClaim(d)
	if err != nil {
		return err
	}
	_, _, err = p.resolveClaim(c.Ref.Namespace, c)
	return err
}

// claims turns a pod's claims into attachments, after the annotation's
// (whose interface names are taken).
func (p *Planner) claims(ctx context.Context, podNamespace string, devs []state.ClaimDevice, taken map[string]bool) ([]Attachment, error) {
	atts := make([]Attachment, 0, len(devs))
	for i, d := range devs {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: planning claims stopped at %d of %d", ErrOutOfTime, i+1, len(devs))
		}
		c, err := p.parseClaim(d)
		if err != nil {
			return nil, err
		}
		if c.Ref.Namespace != podNamespace {
			// A pod can only reference claims of its namespace.
			return nil, fmt.Errorf("%s: %w: the pod is in namespace %q", c.Ref.Where(), ErrClaimNotAllowed, podNamespace)
		}
		n, caps, err := p.resolveClaim(podNamespace, c)
		if err != nil {
			return nil, err
		}
		if ifname := c.Config.Interface; ifname != "" {
			if taken[ifname] {
				return nil, fmt.Errorf("%s: %w: interface %q is taken by another of the pod's networks", c.Ref.Where(), ErrBadClaimConfig, ifname)
			}
			taken[ifname] = true
		}
		ref := c.Ref
		a := Attachment{Network: n, IfName: c.Config.Interface, Caps: caps, Gateways: c.Config.DefaultRoute,
			Explicit: c.Config.Interface != "", Claim: &ref}
		if nad, ok := c.nad(); ok {
			a.NAD = nad.String()
		}
		atts = append(atts, a)
	}
	p.nameInterfaces(atts, taken)
	return atts, nil
}

// resolveClaim resolves a claim's network under the gates.
func (p *Planner) resolveClaim(podNamespace string, c claim) (*cni.Network, map[string]any, error) {
	where := c.Ref.Where()
	sel := c.Config
	owner := cni.Owner{Claim: c.Ref.String()}
	if nad, ok := c.nad(); ok {
		sel.Ref, owner.NAD = nad, nad.String()
		if p.cat.NADs == nil {
			return nil, nil, fmt.Errorf("%s: NetworkAttachmentDefinition %s: Kubernetes mode is off", where, nad)
		}
		return p.resolveNAD(where, podNamespace, sel, owner)
	}
	if err := p.checkCaps(where, sel); err != nil {
		return nil, nil, err
	}
	n, err := p.Local(c.Network)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	return p.finish(where, n, sel, owner)
}

// combinedDefaultRoutes: at most one attachment per address family sets
// the pod's default route, across the annotation and the claims.
func combinedDefaultRoutes(atts []Attachment) error {
	seen := map[bool]string{}
	for _, a := range atts {
		for _, gw := range a.Gateways {
			v4 := gw.To4() != nil
			if first, dup := seen[v4]; dup {
				return fmt.Errorf("%w: %s and %s both set the %s default route", ErrBadClaimConfig, first, a.origin(), family(v4))
			}
			seen[v4] = a.origin()
		}
	}
	return nil
}

// origin names what asked for a: its claim, or its network.
func (a Attachment) origin() string {
	if a.Claim != nil {
		return a.Claim.Where()
	}
	return fmt.Sprintf("network %s", a.Name())
}
