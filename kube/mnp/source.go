package mnp

import (
	"context"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/netpol/ir"
)

// Source is the attach engine's attach.PolicySource (and attach.LocalPeers)
// over the node's cache: Render reads memory only, never the API server.
type Source struct {
	m    *MNP
	opts netpol.Options
	memo *netpol.Memo
}

var (
	_ attach.PolicySource = (*Source)(nil)
	_ attach.LocalPeers   = (*Source)(nil)
)

// Source renders with opts; one memo is shared by every render, so the
// peer sets of one snapshot are computed once whatever the number of pods.
func (m *MNP) Source(opts netpol.Options) *Source {
	return &Source{m: m, opts: opts, memo: netpol.NewMemo()}
}

// Render implements attach.PolicySource. The pod's labels and named ports
// are the API's when the reflector holds the pod (UID-checked), else the
// runtime's labels in t. Before the caches synced it is the deny-all
// ruleset of netpol.Render, and the pod gets a NotSynced Event.
func (s *Source) Render(_ context.Context, t ir.Target) (ir.Ruleset, []ir.Note, error) {
	snap := s.m.Snapshot()
	if labels, ports, ok := s.m.TargetOf(t.Namespace, t.Name, t.UID); ok {
		t.Labels, t.NamedPorts = labels, ports
	}
	rs, notes := netpol.Render(t, snap, s.opts, s.memo)
	s.m.Noted(notes)
	if !snap.Synced() && !rs.Empty() {
		s.m.NotSynced(LocalPod{Namespace: t.Namespace, Name: t.Name, UID: t.UID})
	}
	return rs, notes, nil
}

// SetLocal implements attach.LocalPeers.
func (s *Source) SetLocal(pod attach.PolicyPod, ifs []ir.Interface) {
	s.m.SetLocal(pod.SandboxID, LocalPod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, ifs)
}

// ForgetLocal implements attach.LocalPeers.
func (s *Source) ForgetLocal(pod attach.PolicyPod) { s.m.ForgetLocal(pod.SandboxID) }
