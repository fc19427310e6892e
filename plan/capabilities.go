package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nri-cni/nri-cni/config"
)

// Bandwidth limits Kubernetes accepts for the bandwidth annotations.
const (
	minBandwidth = 1e3  // 1 kbit/s
	maxBandwidth = 1e15 // 1 Pbit/s
)

// ErrCapabilityNotAllowed: a pod set a capability annotation whose
// capability podCapabilities does not list. Wrapped by *CapabilityError.
var ErrCapabilityNotAllowed = errors.New("capability not allowed by podCapabilities")

// CapabilityError names the annotation, the capability it needs and what
// the config allows.
type CapabilityError struct {
	Annotation string
	Capability string
	Allowed    []string
}

func (e *CapabilityError) Error() string {
	return fmt.Sprintf("annotation %s needs capability %q, which %s in nri.conf does not allow (allowed: %v)",
		e.Annotation, e.Capability, config.PodCapabilitiesKey, e.Allowed)
}

// Unwrap makes errors.Is(err, ErrCapabilityNotAllowed) hold.
func (e *CapabilityError) Unwrap() error { return ErrCapabilityNotAllowed }

// capabilityAnnotation maps an annotation to the capability it asks for.
type capabilityAnnotation struct{ annotation, capability string }

// capabilityAnnotations lists every capability annotation, in the order
// they are checked.
func capabilityAnnotations() []capabilityAnnotation {
	return []capabilityAnnotation{
		{AnnotationIngressBandwidth, config.CapabilityBandwidth},
		{AnnotationEgressBandwidth, config.CapabilityBandwidth},
		{AnnotationMAC, config.CapabilityMAC},
		{AnnotationIPs, config.CapabilityIPs},
		{AnnotationPortMappings, config.CapabilityPortMappings},
	}
}

// podCapabilities is the validated podCapabilities of the config, built
// once per Planner.
type podCapabilities struct {
	list    []string // as configured, for messages
	allowed map[string]bool
}

func newPodCapabilities(list []string) podCapabilities {
	pc := podCapabilities{list: append([]string{}, list...), allowed: map[string]bool{}}
	for _, c := range list {
		pc.allowed[c] = true
	}
	return pc
}

// check fails on the first capability annotation the config does not allow.
func (pc podCapabilities) check(ann map[string]string) error {
	for _, ca := range capabilityAnnotations() {
		if _, set := ann[ca.annotation]; set && !pc.allowed[ca.capability] {
			return &CapabilityError{Annotation: ca.annotation, Capability: ca.capability, Allowed: pc.list}
		}
	}
	return nil
}

// fill gives the attachments of a plan made from nri-cni.io/networks or
// nri.conf's networks the runtimeConfig of the pod's capability
// annotations, after checking them. NPWG attachments carry their own (from
// their selection elements): the pod's capability annotations are not
// theirs.
func (pc podCapabilities) fill(atts []Attachment, ann map[string]string) error {
	if len(atts) == 0 || atts[0].NAD != "" {
		return nil
	}
	caps, err := capabilityArgs(ann, pc)
	if err != nil {
		return err
	}
	for i := range atts {
		atts[i].Caps = caps
	}
	return nil
}

// capabilityArgs builds the CNI runtimeConfig from the pod's annotations,
// after checking each one's capability is allowed (nothing is parsed for a
// pod that asks for more than it may). libcni hands each key only to
// plugins that declare the capability.
func capabilityArgs(ann map[string]string, pc podCapabilities) (map[string]any, error) {
	if err := pc.check(ann); err != nil {
		return nil, err
	}
	caps := map[string]any{}
	bad := func(key, value string, err error) error {
		return fmt.Errorf("%w %s=%q: %w", ErrBadAnnotation, key, value, err)
	}
	bw := map[string]any{}
	for key, field := range map[string]string{AnnotationIngressBandwidth: "ingress", AnnotationEgressBandwidth: "egress"} {
		v, ok := ann[key]
		if !ok {
			continue
		}
		rate, err := parseBandwidth(v)
		if err != nil {
			return nil, bad(key, v, err)
		}
		bw[field+"Rate"] = rate
		bw[field+"Burst"] = math.MaxInt32 // as the kubelet does: no burst limit
	}
	if len(bw) > 0 {
		caps["bandwidth"] = bw
	}
	if v, ok := ann[AnnotationMAC]; ok {
		mac, err := parseMAC(v)
		if err != nil {
			return nil, bad(AnnotationMAC, v, err)
		}
		caps["mac"] = mac
	}
	if v, ok := ann[AnnotationIPs]; ok {
		ips, err := parseCIDRs(strings.Split(v, ","))
		if err != nil {
			return nil, bad(AnnotationIPs, v, err)
		}
		caps["ips"] = ips
	}
	if v, ok := ann[AnnotationPortMappings]; ok {
		pms, err := parsePortMappings(v)
		if err != nil {
			return nil, bad(AnnotationPortMappings, v, err)
		}
		caps["portMappings"] = pms
	}
	return caps, nil
}

// bandwidthRe is the form of a bandwidth quantity nri-cni parses: digits,
// an optional fraction, an optional exponent of at most two digits or a
// suffix. resource.ParseQuantity alone takes minutes on a value like
// "1e-999999999" (it computes the exponent's power): the form is checked
// first.
var bandwidthRe = regexp.MustCompile(`^[0-9]{1,16}(\.[0-9]{1,9})?([eE][+-]?[0-9]{1,2}|[kMGTPE]|[KMGTPE]i|m)?$`)

// parseBandwidth parses a kubernetes.io/*-bandwidth value (bits per second)
// as the kubelet does, after checking its form.
func parseBandwidth(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if !bandwidthRe.MatchString(v) {
		return 0, errors.New(`want a quantity such as "10M" or "1Gi" (digits, an optional fraction and SI suffix)`)
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, err
	}
	// q.Value() wraps around past int64 ("18446744.073709552E" is 384M):
	// the quantity itself is bounded first.
	rate := q.Value()
	if q.CmpInt64(maxBandwidth) > 0 || rate < minBandwidth || rate > maxBandwidth {
		return 0, fmt.Errorf("must be between 1k and 1P bits per second")
	}
	return rate, nil
}

// portMapping is the CNI portMappings capability entry.
type portMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

func parsePortMappings(v string) ([]portMapping, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	var pms []portMapping
	if err := dec.Decode(&pms); err != nil {
		return nil, fmt.Errorf(`want a JSON list like [{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]: %w`, err)
	}
	return pms, checkPortMappings(pms)
}

// checkPortMappings validates pms and lower-cases their protocols (tcp when
// empty).
func checkPortMappings(pms []portMapping) error {
	for i, pm := range pms {
		if pm.HostPort < 1 || pm.HostPort > 65535 || pm.ContainerPort < 1 || pm.ContainerPort > 65535 {
			return fmt.Errorf("entry %d: ports must be 1-65535", i+1)
		}
		switch p := strings.ToLower(pm.Protocol); p {
		case "", "tcp", "udp", "sctp":
			pms[i].Protocol = p
			if p == "" {
				pms[i].Protocol = "tcp"
			}
		default:
			return fmt.Errorf("entry %d: protocol %q: want tcp, udp or sctp", i+1, pm.Protocol)
		}
		if pm.HostIP != "" && net.ParseIP(pm.HostIP) == nil {
			return fmt.Errorf("entry %d: hostIP %q is not an IP address", i+1, pm.HostIP)
		}
	}
	return nil
}

// parseMAC accepts a unicast 48-bit Ethernet address.
func parseMAC(v string) (string, error) {
	mac, err := net.ParseMAC(strings.TrimSpace(v))
	switch {
	case err != nil:
		return "", err
	case len(mac) != 6:
		return "", fmt.Errorf("want a 48-bit Ethernet address")
	case mac[0]&1 == 1:
		return "", fmt.Errorf("a multicast address cannot be an interface's")
	}
	return mac.String(), nil
}

// parseCIDRs accepts addresses with a prefix length (what the ips
// capability's IPAMs take).
func parseCIDRs(list []string) ([]string, error) {
	var ips []string
	for _, s := range list {
		s = strings.TrimSpace(s)
		if _, _, err := net.ParseCIDR(s); err != nil {
			return nil, fmt.Errorf("%q: want address/prefix, e.g. 10.1.2.3/24", s)
		}
		ips = append(ips, s)
	}
	return ips, nil
}
