package plan

// The NPWG networks annotation (k8s.v1.cni.cncf.io/networks), as the
// Kubernetes Network Plumbing Working Group's multi-network spec defines it:
// either a comma-separated list of [namespace/]name[@interface], or a JSON
// list of network selection elements. Pure parsing and validation; resolving
// the references is npwg_resolve.go's.
//
// What the spec (v1.3) tells an implementation to ignore is ignored and
// returned, never dropped in silence: an "ipam-claim-reference" (nri-cni
// has no IPAMClaims) and other implementations' extension keys (reverse
// domain name notation). Any other key nri-cni does not know is an error: a
// misspelt key must not silently drop what the pod asked for.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strings"

	"github.com/nri-cni/nri-cni/config"
)

// AnnotationNPWGNetworks is the NPWG networks annotation.
const AnnotationNPWGNetworks = "k8s.v1.cni.cncf.io/networks"

// AnnotationResourceName is the NetworkAttachmentDefinition annotation
// naming the device plugin resource whose device the network takes (the
// NPWG spec's and Multus's): at attach, the device the kubelet allocated to
// the pod for that resource goes to the chain as its deviceID.
const AnnotationResourceName = "k8s.v1.cni.cncf.io/resourceName"

// ErrUnsupportedField: a selection element uses a key of the NPWG spec that
// nri-cni does not implement; the pod fails rather than starting without it.
var ErrUnsupportedField = errors.New("not supported by nri-cni")

// ErrBadInterface: an element's interface name is refused (eth0, lo, a
// name the kernel refuses, or one another element of the pod has).
var ErrBadInterface = errors.New("interface name refused")

// NetworkSelection is one parsed element of the NPWG annotation. Namespace
// is resolved (the pod's own when the element names none).
type NetworkSelection struct {
	Ref          NADRef
	Interface    string         // "" = nri-cni names it (<ifnamePrefix><n>)
	IPs          []string       // "ips" capability (address/prefix)
	MAC          string         // "mac" capability
	PortMappings []portMapping  // "portMappings" capability
	Bandwidth    map[string]any // "bandwidth" capability (ingressRate, ingressBurst, egressRate, egressBurst)
	CNIArgs      map[string]any // the plugins' args.cni
	// DefaultRoute: gateways (at most one per address family) that become
	// the pod's default routes through this attachment's interface. An
	// empty list in the element is nil here: the spec allows it, and it
	// changes nothing.
	DefaultRoute []net.IP
	// IPAMClaim is the element's "ipam-claim-reference", ignored: the spec
	// tells implementations without IPAMClaims to ignore it (KubeVirt's
	// IPAM controller adds it to VMs with persistent IPs). Planning notes
	// it so the pod is told.
	IPAMClaim string
	// Extensions are the element's keys in reverse domain name notation,
	// which the spec reserves for other implementations' extensions:
	// ignored, and noted.
	Extensions []string
}

// selectionElement is the JSON form's element. Keys not listed are errors:
// a misspelt key must not silently drop what the pod asked for.
type selectionElement struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Interface string `json:"interface"`
	// InterfaceRequest: the name older Multus versions used for interface.
	InterfaceRequest string          `json:"interfaceRequest"`
	IPs              []string        `json:"ips"`
	MAC              string          `json:"mac"`
	CNIArgs          map[string]any  `json:"cni-args"`
	PortMappings     []portMapping   `json:"portMappings"`
	Bandwidth        *bandwidthEntry `json:"bandwidth"`
	DefaultRoute     []string        `json:"default-route"`
	// IPAMClaimReference: an IPAMClaim's name (a string), ignored by the
	// annotation and refused by a claim's NetworkConfig.
	IPAMClaimReference *string `json:"ipam-claim-reference"`
	// InfinibandGUID is decoded only so that null (not set) passes; a
	// value is refused (foreignKeys, npwg_keys.go, with Multus's deviceID
	// and the well-known misspellings).
	InfinibandGUID json.RawMessage `json:"infiniband-guid"`
}

// bandwidthEntry is the spec's bandwidth object: the CNI bandwidth
// capability's keys, bits per second and bits.
type bandwidthEntry struct {
	IngressRate  int64 `json:"ingressRate"`
	IngressBurst int64 `json:"ingressBurst"`
	EgressRate   int64 `json:"egressRate"`
	EgressBurst  int64 `json:"egressBurst"`
}

// KeyIPAMClaimReference is the selection element's key naming an IPAMClaim.
const KeyIPAMClaimReference = "ipam-claim-reference"

// extensionKeyRe is a key in reverse domain name notation
// ("org.example.key-name"): two or more labels of letters, digits, '-' and
// '_', joined by dots. The spec reserves every key without a dot for
// itself, so no key of the spec ever looks like this.
var extensionKeyRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9][A-Za-z0-9_-]*)+$`)

// extensionKey reports whether key is another implementation's extension.
func extensionKey(key string) bool { return len(key) <= 253 && extensionKeyRe.MatchString(key) }

// ParseNPWGNetworks parses the annotation's value for a pod of podNamespace,
// with at most maxNetworks elements (a *LimitError past it, before any
// element is decoded). Errors wrap ErrBadAnnotation (or ErrUnsupportedField)
// and name the annotation and the element (1-based) with its network. What
// the spec says to ignore comes back in the selections (IPAMClaim,
// Extensions).
func ParseNPWGNetworks(value, podNamespace string, maxNetworks int) ([]NetworkSelection, error) {
	v := strings.TrimSpace(value)
	if strings.HasPrefix(v, "[") {
		return parseNPWGJSON(v, podNamespace, maxNetworks)
	}
	if err := checkListLength(AnnotationNPWGNetworks, v, maxNetworks); err != nil {
		return nil, err
	}
	if strings.HasPrefix(v, "{") {
		return nil, fmt.Errorf("%w %s: want a JSON list of selection elements ([{...}]), got a single object", ErrBadAnnotation, AnnotationNPWGNetworks)
	}
	var out []NetworkSelection
	for i, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w %s element %d (%q): %s", ErrBadAnnotation, AnnotationNPWGNetworks, i+1, part, fmt.Sprintf(format, args...))
		}
		if part == "" {
			return nil, bad("empty")
		}
		ref, ifname, _ := strings.Cut(part, "@")
		sel := NetworkSelection{Interface: ifname}
		if ns, name, ok := strings.Cut(ref, "/"); ok {
			if ns == "" {
				return nil, bad("empty namespace before '/'")
			}
			sel.Ref = NADRef{Namespace: ns, Name: name}
		} else {
			sel.Ref = NADRef{Name: ref}
		}
		if strings.Contains(part, "@") && ifname == "" {
			return nil, bad("empty interface name after '@'")
		}
		if err := sel.check(podNamespace); err != nil {
			return nil, fmt.Errorf("%w %s element %d (%q): %w", ErrBadAnnotation, AnnotationNPWGNetworks, i+1, part, err)
		}
		out = append(out, sel)
	}
	return out, nil
}

func parseNPWGJSON(v, podNamespace string, maxNetworks int) ([]NetworkSelection, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("%w %s: not a JSON list of selection elements: %w", ErrBadAnnotation, AnnotationNPWGNetworks, err)
	}
	if len(raw) > maxNetworks {
		return nil, &LimitError{Annotation: AnnotationNPWGNetworks, What: "networks", Got: len(raw), Max: maxNetworks,
			Key: config.MaxNetworksPerPodKey}
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w %s: an empty list selects nothing (remove the annotation instead)", ErrBadAnnotation, AnnotationNPWGNetworks)
	}
	out := make([]NetworkSelection, 0, len(raw))
	for i, r := range raw {
		strict, extensions := withoutExtensions(r)
		e, err := decodeElement(strict)
		// A key Multus reads and nri-cni refuses, or a well-known
		// misspelling: say why, rather than "unknown field".
		if kerr := foreignKey(strict); kerr != nil {
			err = kerr
		}
		label := "?"
		if e != nil && e.Name != "" {
			label = e.Name
		}
		bad := func(sentinel error, format string, args ...any) error {
			return fmt.Errorf("%w %s element %d (network %q): %s", sentinel, AnnotationNPWGNetworks, i+1, label, fmt.Sprintf(format, args...))
		}
		var sel NetworkSelection
		if err == nil {
			if sel, err = e.selection(); err == nil {
				err = sel.check(podNamespace)
			}
		}
		if err != nil {
			// Wrapped: ErrUnsupportedField and ErrBadInterface stay visible.
			return nil, fmt.Errorf("%w %s element %d (network %q): %w", ErrBadAnnotation, AnnotationNPWGNetworks, i+1, label, err)
		}
		sel.Extensions = extensions
		for _, gw := range sel.DefaultRoute {
			v4 := gw.To4() != nil
			for j, prev := range out {
				for _, pg := range prev.DefaultRoute {
					if (pg.To4() != nil) == v4 {
						return nil, bad(ErrBadAnnotation, `"default-route": element %d (%s) already sets the %s default route`,
							j+1, prev.Ref.Name, family(v4))
					}
				}
			}
		}
		out = append(out, sel)
	}
	return out, nil
}

// decodeElement decodes a selection element strictly: unknown keys are
// errors (the annotation then asks foreignKey why). Shared by the
// annotation (after withoutExtensions) and a claim's NetworkConfig (after
// its own key checks).
func decodeElement(data []byte) (*selectionElement, error) {
	var e selectionElement
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber() // cni-args reach the plugins exactly as written
	if err := dec.Decode(&e); err != nil {
		return &e, err
	}
	return &e, nil
}

// withoutExtensions returns the element's JSON object without its keys in
// reverse domain name notation, and those keys in document order. The
// other members are copied as written (order and duplicates kept), so the
// strict decoder sees what it would have seen. Anything but an object
// comes back as it is, for the decoder to refuse.
func withoutExtensions(data []byte) ([]byte, []string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return data, nil
	}
	var ext []string
	out := []byte{'{'}
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return data, nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return data, nil
		}
		if extensionKey(key) {
			ext = append(ext, key)
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(key)
		out = append(append(append(out, k...), ':'), v...)
	}
	if len(ext) == 0 {
		return data, nil
	}
	return append(out, '}'), ext
}

func family(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

// selection converts and validates an element's capability keys.
func (e *selectionElement) selection() (NetworkSelection, error) {
	sel := NetworkSelection{Ref: NADRef{Namespace: e.Namespace, Name: e.Name}, Interface: e.Interface, CNIArgs: e.CNIArgs}
	if e.InterfaceRequest != "" {
		if e.Interface != "" {
			return sel, fmt.Errorf(`both "interface" and its old name "interfaceRequest" are set`)
		}
		sel.Interface = e.InterfaceRequest
	}
	if e.IPs != nil {
		ips, err := parseIPRequests(e.IPs)
		if err != nil || len(ips) == 0 {
			return sel, fmt.Errorf(`"ips": %v`, orEmpty(err))
		}
		sel.IPs = ips
	}
	if r := e.IPAMClaimReference; r != nil && *r != "" {
		if e.IPs != nil {
			// The spec makes both in one element an error: the claim's
			// addresses or the element's, not both.
			return sel, fmt.Errorf(`"ips" and %q together: ask for addresses one way`, KeyIPAMClaimReference)
		}
		sel.IPAMClaim = *r
	}
	if e.MAC != "" {
		mac, err := parseMAC(e.MAC)
		if err != nil {
			return sel, fmt.Errorf(`"mac" %q: %w`, e.MAC, err)
		}
		sel.MAC = mac
	}
	if e.PortMappings != nil {
		if err := checkPortMappings(e.PortMappings); err != nil {
			return sel, fmt.Errorf(`"portMappings": %w`, err)
		}
		sel.PortMappings = e.PortMappings
	}
	if e.Bandwidth != nil {
		bw, err := e.Bandwidth.capability()
		if err != nil {
			return sel, fmt.Errorf(`"bandwidth": %w`, err)
		}
		sel.Bandwidth = bw
	}
	if e.DefaultRoute != nil {
		gws, err := parseGateways(e.DefaultRoute)
		if err != nil {
			return sel, fmt.Errorf(`"default-route": %w`, err)
		}
		sel.DefaultRoute = gws
	}
	return sel, nil
}

// parseGateways: a list of IP addresses, at most one per family. An empty
// list is nil: the spec allows it, and nri-cni then moves no route.
func parseGateways(in []string) ([]net.IP, error) {
	var out []net.IP
	seen := map[bool]string{}
	for _, s := range in {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil {
			return nil, fmt.Errorf("%q is not an IP address", s)
		}
		v4 := ip.To4() != nil
		if first, dup := seen[v4]; dup {
			return nil, fmt.Errorf("%s and %s: at most one gateway per address family", first, s)
		}
		seen[v4] = s
		out = append(out, ip)
	}
	return out, nil
}

// parseIPRequests accepts the spec's "ips": IP addresses with an optional
// prefix length ("10.1.2.3/24" or "10.1.2.3"), passed to the plugins as
// written, as Multus does. A plugin that needs the prefix (static IPAM)
// fails the ADD and says so; host-local takes the prefix from its range.
func parseIPRequests(list []string) ([]string, error) {
	var ips []string
	for _, s := range list {
		s = strings.TrimSpace(s)
		if strings.Contains(s, "/") {
			if _, _, err := net.ParseCIDR(s); err != nil {
				return nil, fmt.Errorf("%q: want an IP address with an optional prefix length, e.g. 10.1.2.3/24 or 10.1.2.3", s)
			}
		} else if net.ParseIP(s) == nil {
			return nil, fmt.Errorf("%q is not an IP address", s)
		}
		ips = append(ips, s)
	}
	return ips, nil
}

func orEmpty(err error) error {
	if err == nil {
		return errors.New("an empty list")
	}
	return err
}

// capability validates the entry as the bandwidth plugin will (a rate needs
// its burst) and returns the runtimeConfig value.
func (b *bandwidthEntry) capability() (map[string]any, error) {
	out := map[string]any{}
	for _, d := range []struct {
		dir         string
		rate, burst int64
	}{{"ingress", b.IngressRate, b.IngressBurst}, {"egress", b.EgressRate, b.EgressBurst}} {
		switch {
		case d.rate == 0 && d.burst == 0:
			continue
		case d.rate < minBandwidth || d.rate > maxBandwidth:
			return nil, fmt.Errorf("%sRate %d: must be between 1k and 1P bits per second", d.dir, d.rate)
		case d.burst <= 0 || d.burst > math.MaxInt32:
			return nil, fmt.Errorf("%sBurst %d: must be 1 to %d bits with %sRate set", d.dir, d.burst, math.MaxInt32, d.dir)
		}
		out[d.dir+"Rate"], out[d.dir+"Burst"] = d.rate, d.burst
	}
	if len(out) == 0 {
		return nil, errors.New("sets neither an ingress nor an egress rate")
	}
	return out, nil
}

// check validates the reference and the interface name, and fills in the
// pod's namespace.
func (s *NetworkSelection) check(podNamespace string) error {
	if s.Ref.Namespace == "" {
		s.Ref.Namespace = podNamespace
	} else if !dnsLabel(s.Ref.Namespace) {
		return fmt.Errorf("namespace %q is not a Kubernetes namespace name", s.Ref.Namespace)
	}
	if !dnsSubdomain(s.Ref.Name) {
		return fmt.Errorf("network name %q is not a Kubernetes object name (lower-case letters, digits, '-' and '.')", s.Ref.Name)
	}
	if s.Interface != "" && (!ifnameRe.MatchString(s.Interface) || s.Interface == "lo" || s.Interface == "eth0") {
		return fmt.Errorf("%w: %q is not a usable interface name (not eth0, lo, nor what the kernel refuses)", ErrBadInterface, s.Interface)
	}
	return nil
}

// caps returns the element's runtimeConfig: capability name -> value.
func (s *NetworkSelection) caps() map[string]any {
	c := map[string]any{}
	if s.IPs != nil {
		c["ips"] = s.IPs
	}
	if s.MAC != "" {
		c["mac"] = s.MAC
	}
	if s.PortMappings != nil {
		c["portMappings"] = s.PortMappings
	}
	if s.Bandwidth != nil {
		c["bandwidth"] = s.Bandwidth
	}
	return c
}

// dnsSubdomain: RFC 1123 subdomain, as Kubernetes object names.
func dnsSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if !dnsLabel(label) {
			return false
		}
	}
	return true
}

// dnsLabel: RFC 1123 label, as Kubernetes namespace names.
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
