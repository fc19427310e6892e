package attach

// Reporting, as the engine sees Kubernetes mode: a sink implemented outside
// this package (kube/, which owns the API client) that must not block. No
// API call ever happens on the attach path, and this package imports no
// client-go. Without a sink (the default) nothing is reported.

import (
	"net"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// NetworkStatus is one entry of a pod's network-status (NPWG format).
type NetworkStatus struct {
	Name      string // "namespace/name" of the NAD; a confDir network's CNI name; the runtime's network's name
	Interface string
	IPs       []string // addresses without prefix length, as NPWG writes them
	Mac       string
	Default   bool
	DNS       *state.DNS
	// Gateways: the pod's default routes through this interface (NPWG
	// "default-route").
	Gateways []string
	// Claim is the DRA claim device the network was asked for by (its
	// status.devices entry is written too); nil for the others.
	Claim *state.ClaimRef
	// IPNets are the addresses with their prefix (CIDR), Result the ADD's
	// CNI result: claim networks only (networkData, data).
	IPNets []string
	Result []byte
}

// PodNetworks is a pod's network-status: the runtime's own network first (the
// default entry), then nri-cni's attachments in order.
type PodNetworks struct {
	Namespace, Name, UID string
	SandboxID            string
	// Static: a static pod (from the kubelet's manifest dir or URL). The API
	// server knows it only as its mirror pod, whose UID differs; the mirror
	// carries UID in its kubernetes.io/config.mirror annotation instead.
	Static   bool
	Networks []NetworkStatus
	// ClaimsOnly: Multus writes this pod's network-status (it is the
	// node's primary network); only the claims' status is written.
	ClaimsOnly bool
}

// AttachFailure is a failed attach, for a Warning Event on the pod. Network
// is the NAD reference or CNI network name that failed, when one did (empty
// for failures before any ADD: a bad annotation, an unknown NAD); Err's
// message names the plugin (libcni's "plugin type=… failed (add)").
type AttachFailure struct {
	Namespace, Name, UID string
	SandboxID            string
	Network              string
	Err                  error
}

// StatusSink receives pods' network status and attach failures. Both
// methods must return at once (queue, never call the API inline): they are
// called inside the runtime's request.
type StatusSink interface {
	PodNetworks(PodNetworks)
	AttachFailed(AttachFailure)
}

// DriftSink, when the status sink implements it, is told of every failed
// CHECK (a Warning Event on the pod).
type DriftSink interface {
	CheckFailed(AttachFailure)
}

// Static pods: the kubelet marks a pod that did not come from the API server
// with its source, and names the static pod's UID in its mirror pod.
const (
	annotationConfigSource = "kubernetes.io/config.source"
	configSourceAPI        = "api"
)

// isStatic reports whether the pod's annotations say it is a static pod.
func isStatic(annotations map[string]string) bool {
	src, ok := annotations[annotationConfigSource]
	return ok && src != configSourceAPI
}

// reporter hands the sink what it wants to know. While Multus is the node's
// primary network it owns network-status: nothing is written.
type reporter struct {
	cfg     config.Config
	sink    StatusSink // nil: nothing is reported
	planner *plan.Planner
}

// attached hands rec's networks to the sink (pods with a UID only: the
// status patch is guarded by it).
func (r *reporter) attached(sb Sandbox, rec *state.Record) {
	if r.sink == nil || rec == nil || sb.Kind != "pod" || sb.Pod.UID == "" {
		return
	}
	pn := PodNetworks{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID, SandboxID: sb.ID,
		Static: isStatic(sb.Annotations), ClaimsOnly: r.planner.MultusPrimary() != ""}
	if pn.ClaimsOnly && !hasClaims(rec) {
		return
	}
	pn.Networks = append(pn.Networks, NetworkStatus{
		Name: r.cfg.Kubernetes.PrimaryNetworkName(), Interface: "eth0", IPs: bareIPs(sb.IPs), Default: true,
	})
	for _, n := range rec.Networks {
		name := n.NAD
		if name == "" {
			name = n.Name
		}
		ns := NetworkStatus{Name: name, Interface: n.IfName, IPs: bareIPs(n.IPs), Mac: n.Mac, DNS: n.DNS, Gateways: n.Gateways}
		if n.Claim != nil {
			ns.Claim, ns.IPNets, ns.Result = n.Claim, n.IPs, n.Result
		}
		pn.Networks = append(pn.Networks, ns)
	}
	r.sink.PodNetworks(pn)
}

func hasClaims(rec *state.Record) bool {
	for _, n := range rec.Networks {
		if n.Claim != nil {
			return true
		}
	}
	return false
}

// failed hands a failed attach to the sink.
func (r *reporter) failed(sb Sandbox, network string, err error) {
	if r.sink == nil || sb.Kind != "pod" || sb.Pod.UID == "" {
		return
	}
	r.sink.AttachFailed(AttachFailure{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID,
		SandboxID: sb.ID, Network: network, Err: err})
}

// drift hands a failed CHECK to the sink, if it takes them.
func (r *reporter) drift(rec *state.Record, network string, err error) {
	ds, ok := r.sink.(DriftSink)
	if !ok || rec.Kind != "pod" || rec.UID == "" {
		return
	}
	ds.CheckFailed(AttachFailure{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID, SandboxID: rec.ID,
		Network: network, Err: err})
}

// bareIPs turns "10.1.2.3/24" into "10.1.2.3" (NPWG network-status lists
// addresses); values that are no CIDR pass through.
func bareIPs(in []string) []string {
	var out []string
	for _, s := range in {
		if ip, _, err := net.ParseCIDR(s); err == nil {
			s = ip.String()
		}
		out = append(out, s)
	}
	return out
}
