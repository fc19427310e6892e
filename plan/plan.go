// Package plan decides which networks a sandbox gets: a pure function of the
// pod (its namespace and annotations), nri.conf and the network catalogue
// (confDir's networks, the NetworkAttachmentDefinition cache, readiness,
// whether Multus is the node's primary network). It parses both networks
// annotations, applies the limits, podCapabilities, podCNIArgs, namespace
// isolation and the Multus rule, and names the interfaces. It reads memory
// only: no CNI call, no file, no API request, no lock.
package plan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// Pod is what planning needs to know of a sandbox.
type Pod struct {
	Namespace   string
	Annotations map[string]string
	// Claims are the devices of the pod's prepared DRA claims (driver
	// nri-cni.io), from the DRA driver's records.
	Claims []state.ClaimDevice
}

// Attachment is one network to attach, with its interface name and the
// CNI runtimeConfig it gets.
type Attachment struct {
	Network *cni.Network
	IfName  string
	// NAD is the NetworkAttachmentDefinition ("namespace/name") of an NPWG
	// selection; empty for confDir networks.
	NAD string
	// Caps is the attachment's CNI capability args (runtimeConfig): from
	// its NPWG selection element, else from the pod's capability
	// annotations.
	Caps map[string]any
	// Gateways: the NPWG default-route of the selection; the pod's default
	// routes move to this attachment's interface once every ADD succeeded.
	Gateways []net.IP
	// Explicit: the pod named the interface (else nri-cni did).
	Explicit bool
	// Claim is the DRA claim device that asked for the attachment; nil
	// for an annotation's or nri.conf's.
	Claim *ClaimRef
	// Default: one of nri.conf's defaultNetworks, which every pod gets
	// before its other networks; hot-plug neither adds nor removes one.
	Default bool
	// DeviceID is the device the attachment takes (its network's
	// ResourceName): set at attach from the kubelet's allocation, never
	// by planning, which reads memory only.
	DeviceID string
}

// Name is what status and events call a's network: its NAD, else its CNI
// name.
func (a Attachment) Name() string {
	if a.NAD != "" {
		return a.NAD
	}
	return a.Network.Name
}

// Plan is what a sandbox gets: its attachments, or (Skip non-empty) why it
// gets none. Notes are what planning ignored in the pod's request (what
// the NPWG spec says to ignore), for the caller to tell the pod or log.
type Plan struct {
	Attachments []Attachment
	Skip        string
	Notes       []Note
}

// NADRef names a NetworkAttachmentDefinition.
type NADRef struct {
	Namespace string
	Name      string
}

func (r NADRef) String() string { return r.Namespace + "/" + r.Name }

// NADSource resolves NetworkAttachmentDefinitions from a local cache; it
// never calls the API server. A returned Network with a nil List means "the
// network of that Name in confDir" (an empty spec.config). The Network is
// shared: callers copy before changing it.
type NADSource interface {
	Network(ref NADRef) (*cni.Network, error)
}

// Network source errors. Sources wrap them; the pod's error names the
// reference.
var (
	// ErrSourceNotSynced: the NetworkAttachmentDefinition cache has not
	// completed its first list from the API server. The pod fails (the
	// kubelet retries) rather than being told a network does not exist.
	ErrSourceNotSynced = errors.New("the NetworkAttachmentDefinition cache has not synced with the API server yet; retry later")
	// ErrNoSuchNAD: the cache has synced and holds no such object.
	ErrNoSuchNAD = errors.New("no such NetworkAttachmentDefinition")
	// ErrBadNAD: the object exists but its spec.config is not a usable (or
	// allowed) CNI config.
	ErrBadNAD = errors.New("invalid NetworkAttachmentDefinition")
	// ErrNetworkNotReady: a network's plugin reported not ready (CNI STATUS).
	ErrNetworkNotReady = errors.New("network not ready (CNI STATUS)")
)

// Catalogue is what networks exist for planning.
type Catalogue struct {
	// Local returns confDir's loaded networks, in file order.
	Local func() []*cni.Network
	// NADs resolves NetworkAttachmentDefinitions (Kubernetes mode); nil
	// without it.
	NADs NADSource
	// NotReady returns why network is not ready (CNI STATUS), nil when it
	// is; nil means every network is ready.
	NotReady func(network string) error
	// MultusPrimary returns the config file that makes Multus the node's
	// primary network, or ""; nil means never.
	MultusPrimary func() string
}

// Planner plans sandboxes for one config and catalogue. Safe for
// concurrent use.
type Planner struct {
	cfg     config.Config
	cat     Catalogue
	podCaps podCapabilities
	// autoIfname matches the interface names nri-cni assigns itself.
	autoIfname *regexp.Regexp
}

// New returns a Planner.
func New(cfg config.Config, cat Catalogue) *Planner {
	if cat.Local == nil {
		cat.Local = func() []*cni.Network { return nil }
	}
	return &Planner{cfg: cfg, cat: cat, podCaps: newPodCapabilities(cfg.PodCapabilities),
		autoIfname: regexp.MustCompile("^" + regexp.QuoteMeta(cfg.IfnamePrefix) + "[0-9]+$")}
}

// NPWG reports whether the NPWG annotation is honoured: Kubernetes mode
// with a NetworkAttachmentDefinition source, and the admin opted in.
func (p *Planner) NPWG() bool { return p.cat.NADs != nil && p.cfg.Kubernetes.NPWG() }

// MultusPrimary is the config file that makes Multus this node's primary
// network, or "".
func (p *Planner) MultusPrimary() string {
	if p.cat.MultusPrimary == nil {
		return ""
	}
	return p.cat.MultusPrimary()
}

// MultusOwns returns the config file that makes Multus this node's primary
// network when annotations carry the NPWG annotation nri-cni would honour
// (so it is Multus's here), else "".
func (p *Planner) MultusOwns(annotations map[string]string) string {
	if _, ok := annotations[AnnotationNPWGNetworks]; !ok || !p.NPWG() {
		return ""
	}
	return p.MultusPrimary()
}

// PodNamed reports whether pods may name interfaces themselves
// (podSelection or the NPWG annotation).
func (p *Planner) PodNamed() bool { return p.cfg.PodSelection || p.NPWG() }

// AutoIfname reports whether ifname is one nri-cni names itself
// (<ifnamePrefix><n>).
func (p *Planner) AutoIfname(ifname string) bool { return p.autoIfname.MatchString(ifname) }

// Local finds a loaded confDir network by CNI name.
func (p *Planner) Local(name string) (*cni.Network, error) {
	for _, n := range p.cat.Local() {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%w %q: no valid config with that name in %s", cni.ErrUnknownNetwork, name, p.cfg.ConfDir)
}

// NAD resolves a NetworkAttachmentDefinition to its network (an empty
// spec.config: the confDir network of its name); an error without a
// source.
func (p *Planner) NAD(ref NADRef) (*cni.Network, error) {
	if p.cat.NADs == nil {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s: Kubernetes mode is off", ref)
	}
	n, err := p.cat.NADs.Network(ref)
	if err != nil {
		return nil, err
	}
	return p.expand(n)
}

// expand is a NAD source's network n, or for an empty spec.config (a nil
// List) the confDir network of n's name, taking n's device resource.
func (p *Planner) expand(n *cni.Network) (*cni.Network, error) {
	if n.List != nil {
		return n, nil
	}
	local, err := p.Local(n.Name)
	if err != nil || (n.ResourceName == "" && n.DeviceClaim.IsZero()) {
		return local, err
	}
	withRes := *local
	withRes.ResourceName, withRes.DeviceClaim = n.ResourceName, n.DeviceClaim
	return &withRes, nil
}

// CheckReady fails on the first attachment whose network's plugins said
// they are not ready.
func (p *Planner) CheckReady(atts []Attachment) error {
	if p.cat.NotReady == nil {
		return nil
	}
	for _, a := range atts {
		if err := p.cat.NotReady(a.Network.Name); err != nil {
			return fmt.Errorf("%s: %w: %w", a.Name(), ErrNetworkNotReady, err)
		}
	}
	return nil
}

// Plan decides what a pod gets: nri.conf's defaultNetworks first, then what
// it asks for (or nri.conf's networks), then its claims. Plan.Skip
// (non-empty) says why it gets nothing: its namespace is filtered out, it
// opted out, it did not ask (requireAnnotation), or Multus owns its NPWG
// annotation here — and it has no default network. A pod served that carries
// Multus's default-network annotation is refused (multusdefault.go). Every
// annotation is checked against limits.* before it is parsed, and planning
// stops when ctx ends (the runtime's deadline). Readiness is not checked
// here (CheckReady: at pod start for every attachment, at hot-plug for the
// added ones).
func (p *Planner) Plan(ctx context.Context, pod Pod) (Plan, error) {
	if !p.cfg.Namespaces.Allows(pod.Namespace) {
		if claims := placed(pod.Claims); len(claims) > 0 {
			// Prepared claims are never dropped silently.
			return Plan{}, fmt.Errorf("%s: %w: namespace %q is filtered out (config namespaces)",
				claims[0].Ref.Where(), ErrClaimNotAllowed, pod.Namespace)
		}
		return Plan{Skip: fmt.Sprintf("namespace %q is filtered out (config namespaces)", pod.Namespace)}, nil
	}
	if err := checkAnnotationSizes(pod.Annotations, p.cfg.Limits); err != nil {
		return Plan{}, err
	}
	defaults, err := p.defaults(pod.Namespace)
	if err != nil {
		return Plan{}, err
	}
	chosen, err := p.choose(ctx, pod, defaults)
	if err != nil {
		return Plan{}, err
	}
	if chosen.Skip != "" && len(pod.Claims) == 0 && len(defaults) == 0 {
		return Plan{Skip: chosen.Skip}, nil
	}
	atts := chosen.Attachments
	// The pod's capability annotations are for the networks it chose (or
	// nri.conf's networks), never the default networks: those are the
	// admin's, the same for every pod.
	if err := p.podCaps.fill(atts, pod.Annotations); err != nil {
		return Plan{}, err
	}
	atts = append(defaults, atts...)
	if len(pod.Claims) == 0 {
		return served(pod, Plan{Attachments: atts, Notes: chosen.Notes}, p.MultusPrimary() != "")
	}
	// A pod's claims attach whatever its annotations say: it asked for
	// them explicitly, and the kubelet prepared them.
	if total := len(atts) + len(pod.Claims); total > p.cfg.Limits.MaxNetworksPerPod {
		subject := "the pod's annotations and ResourceClaims"
		if len(defaults) > 0 {
			subject = fmt.Sprintf("the pod's annotations and ResourceClaims, with the %d %s of nri.conf", len(defaults), config.DefaultNetworksKey)
		}
		return Plan{}, &LimitError{Subject: subject, What: "networks", Got: total,
			Max: p.cfg.Limits.MaxNetworksPerPod, Key: config.MaxNetworksPerPodKey}
	}
	taken := map[string]bool{}
	for _, a := range atts {
		taken[a.IfName] = true
	}
	claimed, err := p.claims(ctx, pod.Namespace, pod.Claims, taken)
	if err != nil {
		return Plan{}, err
	}
	atts = append(atts, claimed...)
	if err := combinedDefaultRoutes(atts); err != nil {
		return Plan{}, err
	}
	return served(pod, Plan{Attachments: atts, Notes: chosen.Notes}, p.MultusPrimary() != "")
}

// nameInterfaces gives the attachments without an interface name
// <ifnamePrefix><n>, skipping names taken.
func (p *Planner) nameInterfaces(atts []Attachment, taken map[string]bool) {
	next := 0
	for i := range atts {
		if atts[i].IfName != "" {
			continue
		}
		for {
			name := p.cfg.Ifname(next)
			next++
			if !taken[name] {
				atts[i].IfName, taken[name] = name, true
				break
			}
		}
	}
}

// Diff matches a sandbox's recorded networks with a new plan (hot-plug). A
// planned network whose interface the pod named matches a recorded one with
// that network and interface; one named by nri-cni matches any recorded one
// of that network not matched yet, and keeps its interface. keep maps plan
// index to record index; add are the unmatched planned networks (auto-named
// ones renamed to names free of the kept and added ones); remove are the
// unmatched record indexes, and pending ones (ADD never confirmed: redone).
//
// Default networks (nri.conf's defaultNetworks) are decided when the pod
// starts: Diff matches planned ones with recorded ones only, never adds one
// the record lacks and never removes a recorded one (a config reload
// changes what new pods get, not what a running pod's hot-plug does).
func (p *Planner) Diff(recorded []state.Network, plan []Attachment) (keep map[int]int, add []Attachment, remove []int) {
	return diff(recorded, plan, p.cfg.Ifname)
}
