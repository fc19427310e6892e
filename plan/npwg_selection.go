package plan

// A network selection: one element of the NPWG annotation (or a claim's
// NetworkConfig) converted and validated: addresses, MAC, port mappings,
// bandwidth and gateways in their CNI forms, the reference and interface
// name checked. npwg.go parses the annotation into elements.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
)

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

// bandwidthEntry is the spec's bandwidth object: the CNI bandwidth
// capability's keys, bits per second and bits.
type bandwidthEntry struct {
	IngressRate  int64 `json:"ingressRate"`
	IngressBurst int64 `json:"ingressBurst"`
	EgressRate   int64 `json:"egressRate"`
	EgressBurst  int64 `json:"egressBurst"`
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

// caps returns the element's runtimeConfig: capability name -> value, the
// names from npwgKeys.
func (s *NetworkSelection) caps() map[string]any {
	c := map[string]any{}
	if s.IPs != nil {
		c[npwgCapability("ips")] = s.IPs
	}
	if s.MAC != "" {
		c[npwgCapability("mac")] = s.MAC
	}
	if s.PortMappings != nil {
		c[npwgCapability("portMappings")] = s.PortMappings
	}
	if s.Bandwidth != nil {
		c[npwgCapability("bandwidth")] = s.Bandwidth
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
