package mnp

// Which local sandboxes an event affects (design §4.6). The answer may
// include more than needed (a re-render whose digest did not change costs
// no programming), never less. Work is proportional to the policies of the
// namespaces that have local sandboxes, never to the cluster's pods.

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nri-cni/nri-cni/netpol"
)

// compiled is a policy's selectors, parsed once per cached version.
type compiled struct {
	// target selects the policy's pods (nil: every pod of the namespace,
	// as for an invalid or Oversize policy).
	target labels.Selector
	// peers of all rules that depend on pods (not ipBlock-only).
	peers []peerSel
}

// peerSel is one peer's selectors; a nil field is absent. any: a selector
// that does not parse, which this computation takes as matching.
type peerSel struct {
	pod, ns labels.Selector
}

func compile(p *netpol.Policy) *compiled {
	c := &compiled{}
	if p.Spec == nil {
		return c // Oversize: selects everything, allows nothing
	}
	if s, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector); err == nil {
		c.target = s
	}
	add := func(peers []networkingv1.NetworkPolicyPeer) {
		for _, pr := range peers {
			if pr.PodSelector == nil && pr.NamespaceSelector == nil {
				continue // ipBlock (or nothing): no pod matters
			}
			var ps peerSel
			if pr.PodSelector != nil {
				ps.pod = selectorOrEverything(pr.PodSelector)
			}
			if pr.NamespaceSelector != nil {
				ps.ns = selectorOrEverything(pr.NamespaceSelector)
			}
			c.peers = append(c.peers, ps)
		}
	}
	for _, r := range p.Spec.Ingress {
		add(r.From)
	}
	for _, r := range p.Spec.Egress {
		add(r.To)
	}
	return c
}

// selectorOrEverything parses s; one that does not parse matches
// everything here (over-approximation: the renderer makes it match nothing).
func selectorOrEverything(s *metav1.LabelSelector) labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return labels.Everything()
	}
	return sel
}

// matchesLabels: truncated labels count as matching (the truncation may
// be what changed).
func matchesLabels(s labels.Selector, l map[string]string, truncated bool) bool {
	return truncated || s.Matches(labels.Set(l))
}

// selectsPeer says whether peer selector ps of a policy in namespace
// policyNS matches a pod of namespace podNS (labels pl) whose namespace has
// labels nl.
func (ps peerSel) selectsPeer(policyNS, podNS string, pl map[string]string, plTrunc bool, ns *netpol.Namespace) bool {
	if ps.ns == nil {
		return podNS == policyNS && matchesLabels(ps.pod, pl, plTrunc)
	}
	if ns == nil {
		return false // an unknown namespace matches no namespaceSelector
	}
	if !matchesLabels(ps.ns, ns.Labels, ns.Truncated) {
		return false
	}
	return ps.pod == nil || matchesLabels(ps.pod, pl, plTrunc)
}

// selectsNamespace: ps has a namespaceSelector matching ns.
func (ps peerSel) selectsNamespace(ns *netpol.Namespace) bool {
	return ps.ns != nil && ns != nil && matchesLabels(ps.ns, ns.Labels, ns.Truncated)
}

// targets adds to out the local sandboxes of policy st's namespace that
// its podSelector selects (every one whose pod labels are not known yet).
// Called with c.mu held.
func (c *Cache) targets(st *policyState, out map[string]string) {
	for id, sb := range c.localByNS[st.p.Namespace] {
		if st.sel.target == nil {
			out[id] = sb.namespace
			continue
		}
		e := c.pods[sb.namespace][sb.name]
		if e == nil || e.peer.UID != sb.uid || st.sel.target.Matches(labels.Set(e.peer.Labels)) {
			out[id] = sb.namespace
		}
	}
}

// affectedByPolicy: every local sandbox of the namespace (its selection
// may have changed either way). Called with c.mu held.
func (c *Cache) affectedByPolicy(namespace string, out map[string]string) {
	for id, sb := range c.localByNS[namespace] {
		out[id] = sb.namespace
	}
}

// affectedByNamespace: the targets of policies whose namespaceSelector
// matches the old or the new labels. Called with c.mu held.
func (c *Cache) affectedByNamespace(old, cur *netpol.Namespace, out map[string]string) {
	for ns := range c.localByNS {
		for _, st := range c.policies[ns] {
			for _, ps := range st.sel.peers {
				if ps.selectsNamespace(old) || ps.selectsNamespace(cur) {
					c.targets(st, out)
					break
				}
			}
		}
	}
}

// affectedByPod: the targets of policies one of whose peers selects the
// old or the new pod, and the pod's own sandboxes. Called with c.mu held.
func (c *Cache) affectedByPod(old, cur *podEntry, out map[string]string) {
	var ns, uid string
	for _, e := range []*podEntry{old, cur} {
		if e != nil {
			ns, uid = e.peer.Namespace, e.peer.UID
		}
	}
	for id, sb := range c.localByNS[ns] {
		if sb.uid == uid {
			out[id] = sb.namespace
		}
	}
	nsObj := c.namespaces[ns]
	for pns := range c.localByNS {
		for _, st := range c.policies[pns] {
			if c.policyDependsOn(st, nsObj, old, cur) {
				c.targets(st, out)
			}
		}
	}
}

// policyDependsOn: a peer of st selects old or cur (terminal ones too: a
// pod turning terminal leaves the peers).
func (c *Cache) policyDependsOn(st *policyState, ns *netpol.Namespace, old, cur *podEntry) bool {
	for _, ps := range st.sel.peers {
		for _, e := range []*podEntry{old, cur} {
			if e != nil && ps.selectsPeer(st.p.Namespace, e.peer.Namespace, e.peer.Labels, e.peer.LabelsTruncated, ns) {
				return true
			}
		}
	}
	return false
}
