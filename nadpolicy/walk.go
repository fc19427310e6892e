package nadpolicy

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/nri-cni/nri-cni/config"
)

// Keys are compared as encoding/json matches them to struct fields (and so
// as libcni and the reference plugins read them): case-insensitively, with
// Unicode simple folding (strings.EqualFold; "maſter" is "master"). The
// admission policy's (?i) regular expressions fold the same way.

// Keys the rules look at.
var (
	ipamKeys        = []string{"subnet", "range", "rangeStart", "rangeEnd", "range_start", "range_end", "gateway", "address"}
	deviceSelectors = []string{"pciBusID", "hwaddr", "kernelpath", "deviceID"}
	hostGatewayKeys = []string{"isGateway", "isDefaultGateway", "ipMasq"}
	pathKeySuffixes = []string{"dir", "path", "file", "socket"}
	// masterPluginTypes must name their master (values compare exactly:
	// they are binary names).
	masterPluginTypes = []string{"macvlan", "ipvlan", "vlan"}
)

var cniName = regexp.MustCompile("^" + cniNameRe + "$")

// walker checks one document against one rule, in document order.
type walker struct{ r *rule }

func (w *walker) value(path string, n *node) error {
	switch n.kind {
	case kindObject:
		for _, m := range n.members {
			if err := w.member(path, n, m); err != nil {
				return err
			}
		}
	case kindArray:
		for i, e := range n.elems {
			if err := w.value(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
				return err
			}
		}
	case kindString:
		return w.hostPath(path, n.String(), n.str)
	}
	return nil
}

func (w *walker) fail(path, value, problem, sub, allowed string) error {
	return &Violation{Path: path, Value: value, Problem: problem, PolicyKey: w.r.key + "." + sub, Allowed: allowed}
}

// member checks one key and its value, then walks into the value.
func (w *walker) member(parent string, obj *node, m member) error {
	path := joinPath(parent, m.key)
	v := m.value
	r := w.r
	switch {
	case foldIs(m.key, "runtimeConfig") && !r.r.RuntimeConfig:
		return w.fail(path, "", "is refused: a static runtimeConfig bypasses podCapabilities", "runtimeConfig", "false")
	case foldIn(m.key, deviceSelectors) && v.kind != kindBool:
		// A boolean selects nothing: "capabilities": {"deviceID": true}
		// declares that a plugin takes the device nri-cni hands it (the
		// kubelet's allocation for the pod, docs/device-networks.md).
		return w.fail(path, "", "selects a host device other than by name: refused", "devices", allowedText(r.r.Devices))
	}
	if err := w.keyValue(path, obj, m); err != nil {
		return err
	}
	// A boolean names no path ("capabilities": {"CNIDeviceInfoFile": true}:
	// the file is nri-cni's).
	if foldSuffix(m.key, pathKeySuffixes) && v.kind != kindBool && (v.kind != kindString || !strings.HasPrefix(v.str, "/")) {
		return w.fail(path, v.String(), "must be an absolute host path", "paths", allowedText(r.r.Paths))
	}
	if err := w.hostPath(path, jsonString(m.key)+" (a key)", m.key); err != nil {
		return err
	}
	return w.value(path, v)
}

// keyValue applies the rule of the member's key to its value.
func (w *walker) keyValue(path string, obj *node, m member) error {
	v, r := m.value, w.r
	switch {
	case foldIs(m.key, "name"):
		if v.kind != kindString || !cniName.MatchString(v.str) {
			return &Violation{Path: path, Value: v.String(), Problem: "is not a valid CNI network name: " + cniNameText,
				PolicyKey: config.NADPolicyKey}
		}
	case foldIs(m.key, "type"):
		if v.kind != kindString || !r.types[v.str] {
			return w.fail(path, v.String(), "is not an allowed plugin type", "types", allowedText(r.r.Types))
		}
		if v.str == "bridge" && !namesOne(obj, "bridge") {
			return w.fail(path, v.String(), `names no "bridge": a bridge plugin must name its bridge (its default is cni0)`,
				"bridges", allowedText(r.r.Bridges))
		}
		if isOneOf(v.str, masterPluginTypes) && !namesOne(obj, "master") {
			return w.fail(path, v.String(), `names no "master": a plugin of type `+v.str+` must name its master (its default is the default-route interface of the node)`,
				"masters", allowedText(r.r.Masters))
		}
	case foldIs(m.key, "bridge"):
		return w.ifname(path, v, r.bridges, "bridge", "bridges", r.r.Bridges)
	case foldIs(m.key, "master"):
		return w.ifname(path, v, r.masters, "master", "masters", r.r.Masters)
	case foldIs(m.key, "device"):
		return w.ifname(path, v, r.devices, "device", "devices", r.r.Devices)
	case foldIn(m.key, ipamKeys):
		if v.kind != kindString || !r.inside(v.str) {
			return w.fail(path, v.String(), "is not an IP or CIDR inside the allowed ranges", "ipamRanges", allowedText(r.r.IPAMRanges))
		}
	case foldIs(m.key, "ips"):
		if v.kind != kindArray {
			return w.fail(path, v.String(), "must be a list of IPs or CIDRs inside the allowed ranges", "ipamRanges", allowedText(r.r.IPAMRanges))
		}
		for i, e := range v.elems {
			if e.kind != kindString || !r.inside(e.str) {
				return w.fail(fmt.Sprintf("%s[%d]", path, i), e.String(), "is not an IP or CIDR inside the allowed ranges",
					"ipamRanges", allowedText(r.r.IPAMRanges))
			}
		}
	case foldIn(m.key, hostGatewayKeys):
		if v.kind == kindBool && v.boolean && !r.r.HostGateway {
			return w.fail(path, "true", "puts the host on the network as its gateway or adds NAT rules on the host: refused",
				"hostGateway", "false")
		}
	}
	return nil
}

func (w *walker) ifname(path string, v *node, re *regexp.Regexp, what, sub string, allowed []string) error {
	if v.kind != kindString || v.str == "" || !re.MatchString(v.str) {
		return w.fail(path, v.String(), "is not an allowed "+what, sub, allowedText(allowed))
	}
	return nil
}

// hostPath applies the path rules to any string, key or value: one that
// starts with "/" is a host path and must be at or under an allowed prefix;
// a ".." segment is refused anywhere.
func (w *walker) hostPath(path, shown, s string) error {
	if strings.HasPrefix(s, "/") && !w.r.paths.MatchString(s) {
		return w.fail(path, shown, "is a host path outside the allowed prefixes", "paths", allowedText(w.r.r.Paths))
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == ".." {
			return w.fail(path, shown, `has a ".." path segment: always refused`, "paths", allowedText(w.r.r.Paths))
		}
	}
	return nil
}

// inside: s is an IP, or a CIDR whose network, lies inside an allowed
// range. The same parsing and containment as the Kubernetes CEL library's
// isCIDR/cidr().containsCIDR and isIP/containsIP (net/netip; no zones, no
// IPv4-mapped IPv6).
func (r *rule) inside(s string) bool {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			return false
		}
		for _, rg := range r.ranges {
			if rg.Overlaps(p) && rg.Bits() <= p.Bits() {
				return true
			}
		}
		return false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return false
	}
	for _, rg := range r.ranges {
		if rg.Contains(a) {
			return true
		}
	}
	return false
}

// namesOne: obj has a key named key (folded) whose value is a non-empty
// string.
func namesOne(obj *node, key string) bool {
	for _, m := range obj.members {
		if foldIs(m.key, key) && m.value.kind == kindString && m.value.str != "" {
			return true
		}
	}
	return false
}

func isOneOf(s string, list []string) bool {
	for _, w := range list {
		if s == w {
			return true
		}
	}
	return false
}

func foldIs(key, want string) bool { return strings.EqualFold(key, want) }

func foldIn(key string, list []string) bool {
	for _, w := range list {
		if strings.EqualFold(key, w) {
			return true
		}
	}
	return false
}

// foldSuffix: key ends with one of the suffixes, folded (simple folding
// maps one rune to one rune, so the suffix is counted in runes).
func foldSuffix(key string, suffixes []string) bool {
	rs := []rune(key)
	for _, s := range suffixes {
		n := len([]rune(s))
		if len(rs) >= n && strings.EqualFold(string(rs[len(rs)-n:]), s) {
			return true
		}
	}
	return false
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_\-]*$`)

func joinPath(parent, key string) string {
	if plainKey.MatchString(key) {
		if parent == "" {
			return key
		}
		return parent + "." + key
	}
	return parent + "[" + jsonString(key) + "]"
}

func jsonString(s string) string { return (&node{kind: kindString, str: s}).String() }
