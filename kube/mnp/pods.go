package mnp

// The pod side: one cluster-wide reflector into podStore, which keeps of
// each pod only what policies read, and only of the pods that can matter:
//   - pods with at least one non-default network-status entry (peers): ns,
//     name, UID, labels (capped), named ports, addresses per identity
//     (≤ maxStatusEntries × maxIPsPerEntry), terminal flag;
//   - pods bound to this node (targets): the same, labels uncapped.
// Everything else is dropped in the transform, before the reflector's
// WatchList buffer holds it. A full *corev1.Pod is never kept.

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nri-cni/nri-cni/netpol"
)

// AnnotationNetworkStatus is the NPWG network-status annotation peers'
// addresses come from.
const AnnotationNetworkStatus = "k8s.v1.cni.cncf.io/network-status"

// Bounds of what is read of one pod (as limits.maxNetworksPerPod, KEP-4817).
const (
	maxStatusEntries = 32
	maxIPsPerEntry   = 16
	maxNamedPorts    = 64
	// maxStatusBytes: a longer network-status is not parsed (the pod is
	// then no peer); the API server bounds all annotations to 256 KiB.
	maxStatusBytes = 64 << 10
)

// podEntry is what the index keeps of one pod. Entries are immutable once
// stored: a change stores a new one, so snapshots share them.
type podEntry struct {
	peer netpol.Peer
	// local: spec.nodeName is this node.
	local bool
	// terminal: phase Succeeded or Failed (its IPs may be reused).
	terminal bool
	// keep is false for a pod the index drops (only its key is set).
	keep bool
	// meta is a local pod's metadata as hot-plug reads it (LocalPods);
	// nil for other nodes' pods.
	meta *corev1.Pod
}

// GetObjectMeta gives the reflector's WatchList buffer the entry's key.
func (e *podEntry) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: e.peer.Namespace, Name: e.peer.Name, UID: types.UID(e.peer.UID)}
}

func (e *podEntry) key() string { return e.peer.Namespace + "/" + e.peer.Name }

// intern returns s with its bytes shared with equal strings still alive.
func intern(s string) string { return unique.Make(s).Value() }

// podTransform reduces a pod to a podEntry for node.
func podTransform(node string) cache.TransformFunc {
	return func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil // already reduced, or a tombstone
		}
		return compact(p, node), nil
	}
}

// compact is p as the index keeps it (keep false: dropped).
func compact(p *corev1.Pod, node string) *podEntry {
	e := &podEntry{peer: netpol.Peer{Namespace: intern(p.Namespace), Name: p.Name, UID: string(p.UID)},
		local:    node != "" && p.Spec.NodeName == node,
		terminal: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed}
	e.peer.Addrs = statusAddrs(p.Annotations[AnnotationNetworkStatus])
	if !e.local && len(e.peer.Addrs) == 0 {
		return e // neither a peer nor a target: only the key
	}
	e.keep = true
	if e.local {
		e.meta = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Annotations: p.Annotations, DeletionTimestamp: p.DeletionTimestamp}}
		e.peer.Labels = internLabels(p.Labels)
	} else {
		e.peer.Labels, e.peer.LabelsTruncated = capLabels(p.Labels)
	}
	e.peer.NamedPorts = namedPorts(&p.Spec)
	return e
}

// networkStatus is the part of a network-status entry the index reads.
type networkStatus struct {
	Name    string   `json:"name"`
	IPs     []string `json:"ips"`
	Default bool     `json:"default"`
}

// statusAddrs parses a network-status annotation into addresses per
// identity: a name with "/" is a NAD, one without a node network; default
// entries are skipped; at most maxStatusEntries entries of maxIPsPerEntry
// addresses each. Unparsable JSON gives nothing (the pod is no peer).
func statusAddrs(v string) map[netpol.Identity][]netip.Addr {
	if v == "" || len(v) > maxStatusBytes {
		return nil
	}
	var entries []networkStatus
	if err := json.Unmarshal([]byte(v), &entries); err != nil {
		return nil
	}
	var out map[netpol.Identity][]netip.Addr
	for i, s := range entries {
		if i >= maxStatusEntries {
			break
		}
		if s.Default || s.Name == "" {
			continue
		}
		id := netpol.Identity{Node: intern(s.Name)}
		if strings.Contains(s.Name, "/") {
			id = netpol.Identity{NAD: intern(s.Name)}
		}
		var addrs []netip.Addr
		for j, ip := range s.IPs {
			if j >= maxIPsPerEntry {
				break
			}
			// An entry's ips are addresses, or CIDRs as some plugins write.
			if a, err := netip.ParseAddr(ip); err == nil {
				addrs = append(addrs, a.Unmap())
			} else if pr, err := netip.ParsePrefix(ip); err == nil {
				addrs = append(addrs, pr.Addr().Unmap())
			}
		}
		if len(addrs) == 0 {
			continue
		}
		if out == nil {
			out = map[netpol.Identity][]netip.Addr{}
		}
		out[id] = append(out[id], slices.Clip(addrs)...)
	}
	return out
}

// namedPorts are the named container ports of spec's containers and of its
// sidecars (init containers that keep running), at most maxNamedPorts.
func namedPorts(spec *corev1.PodSpec) []netpol.NamedPort {
	var out []netpol.NamedPort
	add := func(cs []corev1.Container, sidecarsOnly bool) {
		for i := range cs {
			c := &cs[i]
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				if p.Name == "" || p.ContainerPort <= 0 || p.ContainerPort > 65535 || len(out) >= maxNamedPorts {
					continue
				}
				out = append(out, netpol.NamedPort{Name: intern(p.Name), Protocol: protocol(p.Protocol), Port: uint16(p.ContainerPort)})
			}
		}
	}
	add(spec.InitContainers, true)
	add(spec.Containers, false)
	return slices.Clip(out)
}

// protocol maps a container port's protocol (TCP when empty).
func protocol(p corev1.Protocol) netpol.Protocol {
	switch p {
	case corev1.ProtocolUDP:
		return netpol.ProtoUDP
	case corev1.ProtocolSCTP:
		return netpol.ProtoSCTP
	}
	return netpol.ProtoTCP
}

// peerChanged says whether a and b differ in anything a policy reads of a
// peer or a target (nil: absent).
func peerChanged(a, b *podEntry) bool {
	if (a == nil) != (b == nil) {
		return true
	}
	if a == nil {
		return false
	}
	pa, pb := &a.peer, &b.peer
	if a.terminal != b.terminal || a.local != b.local || pa.UID != pb.UID || pa.LabelsTruncated != pb.LabelsTruncated ||
		!mapsEqual(pa.Labels, pb.Labels) || !slices.Equal(pa.NamedPorts, pb.NamedPorts) || len(pa.Addrs) != len(pb.Addrs) {
		return true
	}
	for id, x := range pa.Addrs {
		if !slices.Equal(x, pb.Addrs[id]) {
			return true
		}
	}
	return false
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// podStore is the reflector's store: it hands every reduced pod to the
// cache (which keeps the index) and keeps nothing itself.
type podStore struct {
	node  string
	apply func(key string, e *podEntry) // e nil: deleted
	reset func(entries []*podEntry)     // the whole list (Replace)
}

// Transformer implements cache.TransformingStore: the reflector's WatchList
// buffer holds reduced pods only.
func (s *podStore) Transformer() cache.TransformFunc { return podTransform(s.node) }

func (s *podStore) entry(obj any) *podEntry {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch o := obj.(type) {
	case *podEntry:
		return o
	case *corev1.Pod:
		return compact(o, s.node)
	}
	return nil
}

// Add implements cache.ReflectorStore.
func (s *podStore) Add(obj any) error { return s.Update(obj) }

// Update implements cache.ReflectorStore.
func (s *podStore) Update(obj any) error {
	if e := s.entry(obj); e != nil {
		if e.keep {
			s.apply(e.key(), e)
		} else {
			s.apply(e.key(), nil) // no longer relevant: dropped
		}
	}
	return nil
}

// Delete implements cache.ReflectorStore.
func (s *podStore) Delete(obj any) error {
	if e := s.entry(obj); e != nil {
		s.apply(e.key(), nil)
	}
	return nil
}

// Replace implements cache.ReflectorStore.
func (s *podStore) Replace(list []any, _ string) error {
	entries := make([]*podEntry, 0, len(list))
	for _, obj := range list {
		if e := s.entry(obj); e != nil && e.keep {
			entries = append(entries, e)
		}
	}
	s.reset(entries)
	return nil
}

// Resync implements cache.ReflectorStore (nothing to do).
func (s *podStore) Resync() error { return nil }
