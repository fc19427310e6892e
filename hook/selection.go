package hook

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// ErrBadAnnotation wraps every annotation error; the message names the
// annotation and the bad part.
var ErrBadAnnotation = errors.New("invalid annotation")

// attachment is one network to attach, with its interface name.
type attachment struct {
	net    *cni.Network
	ifname string
	// nad is the NetworkAttachmentDefinition ("namespace/name") of an NPWG
	// selection; empty for confDir networks.
	nad string
	// caps (with ownCaps) is this attachment's runtimeConfig, from its NPWG
	// selection element; otherwise the pod's capability annotations apply.
	caps    map[string]any
	ownCaps bool
	// gateways: the NPWG default-route of the selection; the pod's default
	// routes move to this attachment's interface once every ADD succeeded.
	gateways []net.IP
	// explicit: the pod named the interface (else nri-cni did).
	explicit bool
}

// ifnameRe: what the kernel accepts, minus '/', ':' and whitespace.
var ifnameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// plan decides what the sandbox gets. skip (non-empty) says why it gets
// nothing: its namespace is filtered out, or it opted out. It stops when
// ctx ends (the runtime's deadline), and every annotation it reads is
// checked against limits.* before it is parsed.
func (m *Manager) plan(ctx context.Context, sb Sandbox) (plan []attachment, skip string, err error) {
	if !m.cfg.Namespaces.Allows(sb.Pod.Namespace) {
		return nil, fmt.Sprintf("namespace %q is filtered out (config namespaces)", sb.Pod.Namespace), nil
	}
	if err := checkAnnotationSizes(sb.Annotations, m.cfg.Limits); err != nil {
		return nil, "", err
	}
	value, annotated := sb.Annotations[AnnotationNetworks]
	npwgValue, npwg := sb.Annotations[AnnotationNPWGNetworks]
	if f := m.multusOwns(sb); f != "" {
		// Multus is the primary network and has attached these already.
		if !annotated {
			return nil, fmt.Sprintf("%s is Multus's on this node: Multus is the runtime's primary network (%s)",
				AnnotationNPWGNetworks, f), nil
		}
		npwg = false
	}
	if npwg && m.npwg() {
		if annotated && m.cfg.PodSelection {
			return nil, "", ErrBothAnnotations
		}
		if strings.TrimSpace(npwgValue) == "" {
			return nil, fmt.Sprintf("opted out (empty %s annotation)", AnnotationNPWGNetworks), nil
		}
		plan, err := m.planNPWG(ctx, sb, npwgValue)
		return plan, "", err
	}
	if m.cfg.PodSelection && m.cfg.RequireAnnotation && !annotated {
		return nil, SkipNotRequested, nil
	}
	if !m.cfg.PodSelection || !annotated {
		nets, err := m.engine.Select(m.cfg.Networks)
		if err != nil {
			return nil, "", err
		}
		for i, n := range nets {
			plan = append(plan, attachment{net: n, ifname: m.cfg.Ifname(i)})
		}
		return plan, "", nil
	}
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Sprintf("opted out (empty %s annotation)", AnnotationNetworks), nil
	}
	return m.parseSelection(value)
}

// parseSelection parses "net-a, net-b@eth5": networks by CNI config name
// (loaded from confDir only), optional interface names; the others get
// <ifnamePrefix><n>, skipping names already taken.
func (m *Manager) parseSelection(value string) ([]attachment, string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s=%q: %s", ErrBadAnnotation, AnnotationNetworks, value, fmt.Sprintf(format, args...))
	}
	if err := checkListLength(AnnotationNetworks, value, m.cfg.Limits.MaxNetworksPerPod); err != nil {
		return nil, "", err
	}
	loaded := map[string]*cni.Network{}
	for _, n := range m.engine.Networks() {
		loaded[n.Name] = n
	}
	var plan []attachment
	taken := map[string]bool{}
	for i, part := range strings.Split(value, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, "", bad("entry %d is empty", i+1)
		}
		name, ifname, explicit := strings.Cut(part, "@")
		n, ok := loaded[name]
		if !ok {
			return nil, "", bad("entry %d: unknown network %q (not a valid config in %s)", i+1, name, m.cfg.ConfDir)
		}
		if explicit {
			if !ifnameRe.MatchString(ifname) || ifname == "lo" || ifname == "eth0" {
				return nil, "", bad("entry %d: %q is not a usable interface name", i+1, ifname)
			}
			if taken[ifname] {
				return nil, "", bad("entry %d: interface %q used twice", i+1, ifname)
			}
			taken[ifname] = true
		}
		plan = append(plan, attachment{net: n, ifname: ifname, explicit: explicit})
	}
	m.nameInterfaces(plan, taken)
	return plan, "", nil
}
