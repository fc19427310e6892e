package migrate

// What Multus (v4, thick or thin) gives a pod, modelled only where nri-cni's
// plan alone cannot tell whether the pod would notice the switch. Each rule
// is Multus's code (pkg/multus, pkg/k8sclient, pkg/types), not a guess:
//
//   - interface names: an element without "interface" gets "net<i>", i its
//     1-based position in the annotation (getIfname: the delegate's index),
//     whatever the other elements are named. nri-cni names them the same
//     way (<ifnamePrefix><i>), so they differ only with another
//     ifnamePrefix; a name two elements would get fails with both (Multus:
//     the second ADD finds the interface there);
//   - a NAD with the annotation k8s.v1.cni.cncf.io/resourceName: Multus asks
//     the kubelet which device of that resource the pod got and hands its
//     deviceID to the plugin; nri-cni does not, so SR-IOV and other device
//     plugin networks would attach without their device;
//   - "default-route": once any element has the key, Multus deletes the
//     default routes of every family no element names a gateway for, on
//     every interface, eth0's too (defaultRoutes);
//   - failures Multus shares: a NAD that does not exist ("cannot find a
//     network-attachment-definition"), and an annotation Multus reads as JSON
//     (it holds '[', '{' or '"') that is not a JSON list of objects.
//
// Keys Multus does not know it ignores (encoding/json), so a key nri-cni
// ignores is not a difference; keys nri-cni refuses are, and show as
// refusals.

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/nri-cni/nri-cni/plan"
)

// AnnotationResourceName is the NAD annotation naming a device plugin
// resource.
const AnnotationResourceName = plan.AnnotationResourceName

// multusIfname is the interface Multus gives the i-th (0-based) element.
func multusIfname(a plan.Attachment, i int) string {
	if a.Explicit {
		return a.IfName
	}
	return fmt.Sprintf("net%d", i+1)
}

// compare says whether the attachments of an NPWG plan (one per element, in
// the annotation's order) are what Multus attaches, filling in Multus's
// interface names where they differ, and why not. value is the pod's
// annotation, ips its addresses (none while it is Pending).
//
// The plan's default networks (nri.conf's defaultNetworks) lead atts; Multus
// is taken to have the same defaultNetworks (defaultnetwork.go), so the i-th
// attachment is its delegate i+1 either way.
func (j judge) compare(value string, ips []string, atts []plan.Attachment, nets []Network) (Comparison, Reason, string) {
	var d differences
	k := defaultCount(atts)
	for i, a := range atts {
		if m := multusIfname(a, i); m != a.IfName {
			nets[i].MultusInterface = m
			d.add(ReasonInterfaceName, "%s (%s) gets %s, Multus names it %s", position(i, k), a.Name(), a.IfName, m)
		}
	}
	defaultRoutes(&d, value, ips, atts[k:])
	if d.reason == "" {
		return Same, "", ""
	}
	return Differs, d.reason, strings.Join(d.why, "; ")
}

// differences collects what differs; the first reason names the pod's.
type differences struct {
	reason Reason
	why    []string
}

func (d *differences) add(r Reason, format string, args ...any) {
	if d.reason == "" {
		d.reason = r
	}
	d.why = append(d.why, fmt.Sprintf(format, args...))
}

// defaultRoutes: once any element has "default-route", Multus deletes the
// default routes of every interface, eth0's included, for each address
// family no element names a gateway of (CheckGatewayConfig marks every
// delegate, then DeleteDefaultGW). nri-cni moves only the families named
// and leaves the others, and an empty list changes nothing. So a pod
// differs when an element's list is empty, or when it has addresses of a
// family no gateway names (a dual-stack pod given an IPv4 gateway loses its
// IPv6 default route under Multus).
func defaultRoutes(d *differences, value string, ips []string, atts []plan.Attachment) {
	// Multus's own reading of the key (types.NetworkSelectionElement):
	// present, even empty, is what arms its filter.
	var elements []struct {
		DefaultRoute *[]net.IP `json:"default-route"`
	}
	if !strings.HasPrefix(strings.TrimSpace(value), "[") || json.Unmarshal([]byte(value), &elements) != nil {
		return // the comma form has no default-route
	}
	present := false
	for i, e := range elements {
		if e.DefaultRoute == nil {
			continue
		}
		present = true
		if len(*e.DefaultRoute) == 0 && i < len(atts) {
			d.add(ReasonDefaultRoute, `element %d (%s): "default-route": [] removes every default route of the pod under Multus, eth0's too; nri-cni changes nothing`,
				i+1, atts[i].Name())
		}
	}
	if !present {
		return
	}
	named := map[bool]bool{} // IPv4? → a gateway of that family is named
	for _, a := range atts {
		for _, gw := range a.Gateways {
			named[gw.To4() != nil] = true
		}
	}
	for _, ip := range ips {
		if addr := net.ParseIP(ip); addr != nil && !named[addr.To4() != nil] {
			d.add(ReasonDefaultRoute, `no element names an %s gateway: Multus removes the pod's %s default routes (%s), nri-cni keeps them`,
				family(addr.To4() != nil), family(addr.To4() != nil), ip)
			return
		}
	}
}

func family(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

// multusFailsToo reports whether Multus fails a pod that nri-cni refuses for
// reason, given its annotation's value.
func multusFailsToo(reason Reason, value string) bool {
	switch reason {
	case ReasonNoSuchNAD, ReasonBadInterface:
		return true
	case ReasonBadAnnotation:
		if !strings.ContainsAny(value, `[{"`) {
			return false // Multus's comma form: its rules are not modelled
		}
		var elements []map[string]json.RawMessage
		return json.Unmarshal([]byte(value), &elements) != nil
	}
	return false
}
