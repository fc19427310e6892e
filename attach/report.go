package attach

// Reporting, as the engine sees Kubernetes mode: a sink implemented outside
// this package (kube/, which owns the API client) that must not block. No
// API call ever happens on the attach path, and this package imports no
// client-go. Without a sink (the default) nothing is reported.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"

	"github.com/sirupsen/logrus"

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
	// MTU is the interface's MTU as the ADD result reported it (0: none).
	MTU     int
	Default bool
	DNS     *state.DNS
	// Gateway: the gateways of the pod's default routes through this
	// interface, as readers of network-status with the NPWG client
	// library's types expect them ("gateway"; see statusGateways).
	Gateway []string
	// Gateways: the pod's default routes nri-cni set through this
	// interface (the NPWG spec's "default-route" of the entry).
	Gateways []string
	// Claim is the DRA claim device the network was asked for by (its
	// status.devices entry is written too); nil for the others.
	Claim *state.ClaimRef
	// IPNets are the addresses with their prefix (CIDR), Result the ADD's
	// CNI result: claim networks only (networkData, data).
	IPNets []string
	Result []byte
	// DeviceInfo is the NPWG device-info of the network's device (a
	// device plugin resource's), as its CNI device-info file said.
	DeviceInfo []byte
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
	// Confirmed: a resync's report of a pod whose network-status is known
	// written as it is (Manager.StatusWritten recorded it): only its
	// claims' status is written.
	Confirmed bool
}

// Digest identifies the network-status pn reports (the pod and what each
// entry says), not how it is to be written.
func (pn PodNetworks) Digest() string {
	data, err := json.Marshal(struct {
		Namespace, Name, UID, SandboxID string
		Static                          bool
		Networks                        []NetworkStatus
	}{pn.Namespace, pn.Name, pn.UID, pn.SandboxID, pn.Static, pn.Networks})
	if err != nil { // nothing in it fails to encode; never equal then
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
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

// PodNote is a warning of planning (plan.Note) about a pod whose networks
// were attached: something it asked for that it did not get.
type PodNote struct {
	Namespace, Name, UID string
	SandboxID            string
	Note                 plan.Note
}

// NoteSink, when the status sink implements it, is told of planning's
// warnings about each pod attached (a Warning Event on the pod). It must
// return at once, as StatusSink's methods.
type NoteSink interface {
	Noted(PodNote)
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
	if pn := r.status(sb, rec); pn != nil {
		r.sink.PodNetworks(*pn)
	}
}

// resynced hands rec's networks to the sink after a resync, unless they
// are what was last confirmed written: a restarted nri-cni writes the
// statuses it did not confirm (lost with its queue), not every running
// pod's again. The claims' status of a confirmed pod is handed over still
// (its writer reads each claim and writes only a change).
func (r *reporter) resynced(sb Sandbox, rec *state.Record) {
	pn := r.status(sb, rec)
	if pn == nil {
		return
	}
	if rec.StatusDigest != "" && rec.StatusDigest == pn.Digest() {
		if !hasClaims(rec) {
			return
		}
		pn.Confirmed = true
	}
	r.sink.PodNetworks(*pn)
}

// status is rec's network-status, nil when there is nothing to report.
func (r *reporter) status(sb Sandbox, rec *state.Record) *PodNetworks {
	if r.sink == nil || rec == nil || sb.Kind != "pod" || sb.Pod.UID == "" {
		return nil
	}
	pn := PodNetworks{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID, SandboxID: sb.ID,
		Static: isStatic(sb.Annotations), ClaimsOnly: r.planner.MultusPrimary() != ""}
	if pn.ClaimsOnly && !hasClaims(rec) {
		return nil
	}
	pn.Networks = append(pn.Networks, NetworkStatus{
		Name: r.cfg.Kubernetes.PrimaryNetworkName(), Interface: "eth0", IPs: bareIPs(sb.IPs), Default: true,
	})
	gateways := statusGateways(rec.Networks)
	for i, n := range rec.Networks {
		name := n.NAD
		if name == "" {
			name = n.Name
		}
		ns := NetworkStatus{Name: name, Interface: n.IfName, IPs: bareIPs(n.IPs), Mac: n.Mac, MTU: n.MTU, DNS: n.DNS,
			Gateway: gateways[i], Gateways: n.Gateways, DeviceInfo: n.DeviceInfo}
		if n.Claim != nil {
			ns.Claim, ns.IPNets, ns.Result = n.Claim, n.IPs, n.Result
		}
		pn.Networks = append(pn.Networks, ns)
	}
	return &pn
}

// statusGateways is network-status's "gateway" of each of nets: the
// gateways of the pod's default routes through that interface. Where no
// NPWG default-route was set, the ADD result's default routes (what the
// NPWG client library writes). In an address family whose default route a
// default-route set, nri-cni replaced every default route of the family
// (netns.SetDefaultRoutes): only the attachment that carries it lists one,
// its gateway. Multus lists the result's routes even then; the annotation
// should say what the pod has.
func statusGateways(nets []state.Network) [][]string {
	moved := map[bool]bool{} // IPv4? -> a default-route set that family
	for _, n := range nets {
		for _, gw := range n.Gateways {
			moved[isIPv4(gw)] = true
		}
	}
	out := make([][]string, len(nets))
	for i, n := range nets {
		for _, gw := range n.ResultGateways {
			if !moved[isIPv4(gw)] {
				out[i] = append(out[i], gw)
			}
		}
		out[i] = append(out[i], n.Gateways...)
	}
	return out
}

// isIPv4 reports whether the address s is an IPv4 address.
func isIPv4(s string) bool {
	ip := net.ParseIP(s)
	return ip != nil && ip.To4() != nil
}

// noted tells the sink of planning's warnings about sb (the notes of the
// interfaces only selects, all when it is nil) and logs the other notes
// at debug level: keys the pod's owner meant for another implementation.
func (r *reporter) noted(log *logrus.Entry, sb Sandbox, notes []plan.Note, only map[string]bool) {
	ns, _ := r.sink.(NoteSink)
	for _, n := range notes {
		if only != nil && !only[n.IfName] {
			continue
		}
		l := log.WithFields(logrus.Fields{"nad": n.Network, "ifname": n.IfName, "key": n.Key})
		if !n.Warning {
			l.Debug(n.Message)
			continue
		}
		l.Info(n.Message)
		if ns != nil && sb.Kind == "pod" && sb.Pod.UID != "" {
			ns.Noted(PodNote{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID, SandboxID: sb.ID, Note: n})
		}
	}
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

// StartedWithout is a pod found with containers already running before its
// networks were attached: nri-cni was not serving and the node's runtime did
// not refuse them (it is not set up to fail closed: deploy/node).
type StartedWithout struct {
	Namespace, Name, UID string
	SandboxID            string
	// Containers are the names of the containers found running.
	Containers []string
	// Attached: the pod's networks were attached now; false: its attach
	// failed, it runs without them.
	Attached bool
	// Restarting: failClosed.restartStarted: the containers are stopped so
	// that the kubelet starts them again with the networks in place.
	Restarting bool
}

// StartedWithoutSink, when the status sink implements it, is told of every
// pod found with containers running before its networks (a Warning Event
// on the pod). It must return at once.
type StartedWithoutSink interface {
	StartedWithoutNetworks(StartedWithout)
}

// StartedObserver, when the observer (metrics) implements it, counts the
// containers found running before their pod's networks.
type StartedObserver interface {
	StartedWithoutNetworks(containers int)
}
