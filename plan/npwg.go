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
	"github.com/nri-cni/nri-cni/apis/v1alpha1"
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

// ErrUnsupportedField: a selection element (or a claim's NetworkConfig)
// uses a key of the NPWG spec that nri-cni does not implement; the pod
// fails rather than starting without it.
var ErrUnsupportedField = v1alpha1.ErrUnsupported

// ErrBadInterface: an element's interface name is refused (eth0, lo, a
// name the kernel refuses, or one another element of the pod has).
var ErrBadInterface = errors.New("interface name refused")

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
