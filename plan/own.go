package plan

// Which annotation decides: the NPWG annotation (Kubernetes mode), the
// pod's own nri-cni.io/networks (podSelection), or nri.conf's networks.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nri-cni/nri-cni/cni"
)

// Pod annotations nri-cni reads.
const (
	AnnotationNetworks         = "nri-cni.io/networks"
	AnnotationMAC              = "nri-cni.io/mac"
	AnnotationIPs              = "nri-cni.io/ips"
	AnnotationPortMappings     = "nri-cni.io/port-mappings"
	AnnotationIngressBandwidth = "kubernetes.io/ingress-bandwidth"
	AnnotationEgressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// SkipNotRequested: with requireAnnotation, a pod that does not ask for
// networks gets none (the common case: logged at debug only).
const SkipNotRequested = "no " + AnnotationNetworks + " annotation (requireAnnotation: opt-in only)"

// SkipNoConfig (a format: the confDir): a pod that asks for no network by
// name gets nri.conf's `networks: []`, the first config of confDir, and
// there is none (the dir is empty, missing or holds only invalid files).
// It gets nothing and is not failed: a missing config of nri-cni's own is
// not the pod's fault. A network named (nri.conf networks, defaultNetworks,
// the pod's annotation) that is missing still fails the pod.
const SkipNoConfig = "no valid CNI network config in %s: nri.conf networks: [] attaches the first one there, so nothing to attach"

// ErrBadAnnotation wraps every annotation error; the message names the
// annotation and the bad part.
var ErrBadAnnotation = errors.New("invalid annotation")

// ifnameRe: what the kernel accepts, minus '/', ':' and whitespace.
var ifnameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// usableIfname: a kernel interface name that is not the runtime's.
func usableIfname(s string) bool { return ifnameRe.MatchString(s) && s != "lo" && s != "eth0" }

// choose picks the attachments (without their capability args), with the
// notes of what it ignored, or says why there are none (Skip). defaults are
// the pod's default networks, which come first: what choose names is
// numbered after them, and a name the pod gives one of theirs is refused.
func (p *Planner) choose(ctx context.Context, pod Pod, defaults []Attachment) (Plan, error) {
	value, annotated := pod.Annotations[AnnotationNetworks]
	npwgValue, npwg := pod.Annotations[AnnotationNPWGNetworks]
	if f := p.MultusOwns(pod.Annotations); f != "" {
		// Multus is the primary network and has attached these already.
		if !annotated {
			return Plan{Skip: fmt.Sprintf("%s is Multus's on this node: Multus is the runtime's primary network (%s)",
				AnnotationNPWGNetworks, f)}, nil
		}
		npwg = false
	}
	if npwg && p.NPWG() {
		if annotated && p.cfg.PodSelection {
			return Plan{}, ErrBothAnnotations
		}
		if strings.TrimSpace(npwgValue) == "" {
			return Plan{Skip: fmt.Sprintf("opted out (empty %s annotation)", AnnotationNPWGNetworks)}, nil
		}
		atts, notes, err := p.npwg(ctx, pod.Namespace, npwgValue, defaults)
		return Plan{Attachments: atts, Notes: notes}, err
	}
	if p.cfg.PodSelection && p.cfg.RequireAnnotation && !annotated {
		return Plan{Skip: SkipNotRequested}, nil
	}
	if !p.cfg.PodSelection || !annotated {
		if len(p.cfg.Networks) == 0 && len(p.cat.Local()) == 0 {
			// networks: [] is the first config of confDir, not a network
			// the pod or the admin named: with none there (the dir empty
			// or missing), the pod asked for nothing nri-cni has.
			return Plan{Skip: fmt.Sprintf(SkipNoConfig, p.cfg.ConfDir)}, nil
		}
		nets, err := cni.Select(p.cat.Local(), p.cfg.Networks, p.cfg.ConfDir)
		if err != nil {
			return Plan{}, err
		}
		atts := make([]Attachment, 0, len(nets))
		for i, n := range nets {
			atts = append(atts, Attachment{Network: n, IfName: p.cfg.Ifname(len(defaults) + i)})
		}
		return Plan{Attachments: atts}, nil
	}
	if strings.TrimSpace(value) == "" {
		return Plan{Skip: fmt.Sprintf("opted out (empty %s annotation)", AnnotationNetworks)}, nil
	}
	atts, err := p.own(value, defaults)
	return Plan{Attachments: atts}, err
}

// own parses "net-a, net-b@eth5": networks by CNI config name (loaded from
// confDir only), optional interface names; the others get
// <ifnamePrefix><n>, skipping names already taken (the default networks'
// first).
func (p *Planner) own(value string, defaults []Attachment) ([]Attachment, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s=%q: %s", ErrBadAnnotation, AnnotationNetworks, value, fmt.Sprintf(format, args...))
	}
	if err := checkListLength(AnnotationNetworks, value, p.cfg.Limits.MaxNetworksPerPod-len(defaults)); err != nil {
		return nil, withDefaults(err, len(defaults))
	}
	reserved := reservedNames(defaults)
	loaded := map[string]*cni.Network{}
	for _, n := range p.cat.Local() {
		loaded[n.Name] = n
	}
	var atts []Attachment
	taken := map[string]bool{}
	for name := range reserved {
		taken[name] = true
	}
	for i, part := range strings.Split(value, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, bad("entry %d is empty", i+1)
		}
		name, ifname, explicit := strings.Cut(part, "@")
		n, ok := loaded[name]
		if !ok {
			return nil, bad("entry %d: unknown network %q (not a valid config in %s)", i+1, name, p.cfg.ConfDir)
		}
		if explicit {
			if !usableIfname(ifname) {
				return nil, bad("entry %d: %q is not a usable interface name", i+1, ifname)
			}
			if d, ok := reserved[ifname]; ok {
				return nil, bad("entry %d: interface %q is %s's", i+1, ifname, d)
			}
			if taken[ifname] {
				return nil, bad("entry %d: interface %q used twice", i+1, ifname)
			}
			taken[ifname] = true
		}
		atts = append(atts, Attachment{Network: n, IfName: ifname, Explicit: explicit})
	}
	p.nameInterfaces(atts, taken)
	return atts, nil
}
