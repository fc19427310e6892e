package hook

// Kubernetes mode, as the Manager sees it: two small interfaces implemented
// outside this package (kube/, which owns the API client). The Manager only
// reads a local cache (NetworkSource) and hands status to a sink that must
// not block (StatusSink): no API call ever happens on the attach path, and
// this package imports no client-go. Without them (nil, the default) the
// Manager behaves exactly as without Kubernetes mode.

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// Network source errors. Sources wrap them; the pod's error names the
// reference.
var (
	// ErrSourceNotSynced: the NetworkAttachmentDefinition cache has not
	// completed its first list from the API server. The pod fails (the
	// kubelet retries) rather than being told a network does not exist.
	ErrSourceNotSynced = errors.New("the NetworkAttachmentDefinition cache has not synced with the API server yet; retry later")
	// ErrNoSuchNAD: the cache has synced and holds no such object.
	ErrNoSuchNAD = errors.New("no such NetworkAttachmentDefinition")
	// ErrBadNAD: the object exists but its spec.config is not a usable CNI
	// config.
	ErrBadNAD = errors.New("invalid NetworkAttachmentDefinition")
)

// NADRef names a NetworkAttachmentDefinition.
type NADRef struct {
	Namespace string
	Name      string
}

func (r NADRef) String() string { return r.Namespace + "/" + r.Name }

// NetworkSource resolves NetworkAttachmentDefinitions from a local cache; it
// never calls the API server. A returned Network with a nil List means "the
// network of that Name in confDir" (an empty spec.config, as the NPWG spec
// says); the Manager looks it up among the loaded configs. The Network is
// shared: callers copy before changing it (cni.Network.WithCNIArgs).
type NetworkSource interface {
	Network(ref NADRef) (*cni.Network, error)
}

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

// Option configures a Manager (NewManager, Build).
type Option func(*Manager)

// WithNetworkSource turns on Kubernetes networks: with the config's
// kubernetes.npwgAnnotation, pods select NetworkAttachmentDefinitions with
// the NPWG annotation. nil keeps them off.
func WithNetworkSource(src NetworkSource) Option { return func(m *Manager) { m.source = src } }

// WithStatusSink makes the Manager report each pod's networks after every
// successful attach and resync, and every failed attach. nil reports
// nothing.
func WithStatusSink(sink StatusSink) Option { return func(m *Manager) { m.sink = sink } }

// WithMultusCheck tells the Manager where to learn whether Multus is this
// node's primary network (it returns the config file that says so, or "").
// While it is, Multus owns the NPWG annotation and network-status: nri-cni
// attaches no NPWG networks and writes no status, so the two never attach
// the same network or overwrite each other's status. nri-cni.io/networks
// keeps working.
func WithMultusCheck(primary func() string) Option { return func(m *Manager) { m.multus = primary } }

// npwg reports whether the NPWG annotation is honoured: Kubernetes mode with
// a network source, and the admin opted in.
func (m *Manager) npwg() bool { return m.source != nil && m.cfg.Kubernetes.NPWG() }

// multusPrimary is the config file that makes Multus this node's primary
// network, or "".
func (m *Manager) multusPrimary() string {
	if m.multus == nil {
		return ""
	}
	return m.multus()
}

// multusOwns returns the config file that makes Multus this node's primary
// network when sb carries the NPWG annotation nri-cni would honour (so it is
// Multus's here), else "".
func (m *Manager) multusOwns(sb Sandbox) string {
	if _, ok := sb.Annotations[AnnotationNPWGNetworks]; !ok || !m.npwg() {
		return ""
	}
	return m.multusPrimary()
}

// reportAttached hands rec's networks to the sink (pods with a UID only:
// the status patch is guarded by it).
func (m *Manager) reportAttached(sb Sandbox, rec *state.Record) {
	if m.sink == nil || rec == nil || sb.Kind != "pod" || sb.Pod.UID == "" || m.multusPrimary() != "" {
		return
	}
	pn := PodNetworks{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID, SandboxID: sb.ID,
		Static: isStatic(sb.Annotations)}
	pn.Networks = append(pn.Networks, NetworkStatus{
		Name: m.cfg.Kubernetes.PrimaryNetworkName(), Interface: "eth0", IPs: bareIPs(sb.IPs), Default: true,
	})
	for _, n := range rec.Networks {
		name := n.NAD
		if name == "" {
			name = n.Name
		}
		pn.Networks = append(pn.Networks, NetworkStatus{Name: name, Interface: n.IfName, IPs: bareIPs(n.IPs), Mac: n.Mac,
			DNS: n.DNS, Gateways: n.Gateways})
	}
	m.sink.PodNetworks(pn)
}

// reportFailure hands a failed attach to the sink.
func (m *Manager) reportFailure(sb Sandbox, network string, err error) {
	if m.sink == nil || sb.Kind != "pod" || sb.Pod.UID == "" {
		return
	}
	m.sink.AttachFailed(AttachFailure{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID,
		SandboxID: sb.ID, Network: network, Err: err})
}

// reportLive reports the network status of every listed pod nri-cni has an
// attached record of (after a resync: a restarted nri-cni, or a status write
// lost earlier, is caught up).
func (m *Manager) reportLive(live []Sandbox) {
	if m.sink == nil {
		return
	}
	for _, sb := range live {
		if rec, err := m.store.Get(sb.ID); err == nil && rec.Phase == state.PhaseAttached {
			m.reportAttached(sb, rec)
		}
	}
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

// nadFallback returns the network a DEL falls back to when libcni has no
// cached config for it (an ADD that failed part-way is not cached): the
// NetworkAttachmentDefinition the record names, as the cache has it now.
func (m *Manager) nadFallback(n state.Network) *cni.Network {
	if n.NAD == "" || m.source == nil {
		return nil
	}
	ns, name, ok := cutRef(n.NAD)
	if !ok {
		return nil
	}
	net, err := m.source.Network(NADRef{Namespace: ns, Name: name})
	if err != nil {
		return nil
	}
	if net.List == nil {
		net, _ = m.localNetwork(net.Name)
	}
	return net
}

// localNetwork finds a loaded confDir network by CNI name.
func (m *Manager) localNetwork(name string) (*cni.Network, error) {
	for _, n := range m.engine.Networks() {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%w %q: no valid config with that name in %s", cni.ErrUnknownNetwork, name, m.cfg.ConfDir)
}

func cutRef(s string) (ns, name string, ok bool) {
	ns, name, ok = strings.Cut(s, "/")
	return ns, name, ok && ns != "" && name != ""
}
