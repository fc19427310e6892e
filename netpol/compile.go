package netpol

import (
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// compiled is a policy checked and turned into what rendering needs: it is
// independent of the target, so a Memo shares it between the pods of one
// reconcile round.
type compiled struct {
	pol  *Policy
	nets networks
	// sel selects the targets; nil selects every pod of the namespace
	// (an invalid podSelector or an Oversize policy: fail closed).
	sel labels.Selector
	// isolates per direction (index Ingress, Egress).
	isolates [3]bool
	// rules per direction; nil when the policy allows nothing.
	rules [3][]crule
	notes []Note
}

// crule is one ingress or egress rule.
type crule struct {
	dir   Direction
	index int
	// anyPeer: from/to empty, every address.
	anyPeer bool
	peers   []cpeer
	// anyPort: ports empty, every protocol and port.
	anyPort bool
	ports   []cport
}

// cpeer is one valid peer: an ipBlock, or selectors.
type cpeer struct {
	block []span // cidr minus excepts, one family
	fam   int
	isIP  bool
	// ns nil: the policy's namespace; pod nil: every pod of the namespaces.
	ns, pod labels.Selector
}

// cport is one valid port entry: a range, every port of proto, or a name.
type cport struct {
	proto Protocol
	all   bool
	rng   PortRange
	named string
}

func (c *compiled) note(reason, format string, args ...any) {
	c.notes = append(c.notes, Note{Namespace: c.pol.Namespace, Policy: c.pol.Name, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// compile checks a policy against the limits. Past a per-policy cap, or
// when the cache marked it Oversize, the policy selects every pod of its
// namespace, isolates both directions and allows nothing. Every other
// invalid element allows nothing and is noted.
func compile(p *Policy, lim Limits) *compiled {
	c := &compiled{pol: p}
	nets, bad := parsePolicyFor(p.PolicyFor, p.Namespace)
	c.nets = nets
	for _, b := range bad {
		c.note("Invalid", "metadata.annotations[%s]: %s", PolicyForAnnotation, b)
	}
	if p.Oversize || p.Spec == nil {
		c.note("Oversize", "the policy exceeds a count limit: it isolates the pods of its namespace and allows nothing")
		c.isolates = [3]bool{false, true, true}
		return c
	}
	spec := p.Spec
	if why := Oversize(spec, lim); why != "" {
		c.note("Oversize", "%s: the policy isolates the pods of its namespace and allows nothing", why)
		c.isolates = [3]bool{false, true, true}
		return c
	}
	c.isolates = policyTypes(c, spec)
	sel, err := selector(&spec.PodSelector, lim)
	if err != nil {
		c.note("Invalid", "spec.podSelector: %v: the policy isolates every pod of its namespace and allows nothing", err)
		return c
	}
	c.sel = sel
	for i := range spec.Ingress {
		r := &spec.Ingress[i]
		c.rules[Ingress] = append(c.rules[Ingress], c.rule(Ingress, i, r.From, r.Ports, lim))
	}
	for i := range spec.Egress {
		r := &spec.Egress[i]
		c.rules[Egress] = append(c.rules[Egress], c.rule(Egress, i, r.To, r.Ports, lim))
	}
	return c
}

// Oversize names the first per-policy count cap the spec exceeds ("" when
// none): the renderer's check, and kube/mnp's informer transform, which
// keeps such a policy without its spec.
func Oversize(s *networkingv1.NetworkPolicySpec, lim Limits) string {
	if n := len(s.Ingress) + len(s.Egress); n > lim.MaxRulesPerPolicy {
		return fmt.Sprintf("spec: %d ingress and egress rules (at most %d)", n, lim.MaxRulesPerPolicy)
	}
	if why := selectorOversize("spec.podSelector", &s.PodSelector, lim); why != "" {
		return why
	}
	check := func(field string, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) string {
		if len(peers) > lim.MaxPeersPerRule {
			return fmt.Sprintf("%s: %d peers (at most %d)", field, len(peers), lim.MaxPeersPerRule)
		}
		if len(ports) > lim.MaxPortsPerRule {
			return fmt.Sprintf("%s.ports: %d entries (at most %d)", field, len(ports), lim.MaxPortsPerRule)
		}
		for j, p := range peers {
			if p.IPBlock != nil && len(p.IPBlock.Except) > lim.MaxExceptsPerIPBlock {
				return fmt.Sprintf("%s[%d].ipBlock.except: %d entries (at most %d)", field, j, len(p.IPBlock.Except), lim.MaxExceptsPerIPBlock)
			}
		}
		return ""
	}
	for i, r := range s.Ingress {
		if why := check(fmt.Sprintf("spec.ingress[%d].from", i), r.From, r.Ports); why != "" {
			return why
		}
	}
	for i, r := range s.Egress {
		if why := check(fmt.Sprintf("spec.egress[%d].to", i), r.To, r.Ports); why != "" {
			return why
		}
	}
	return ""
}

func selectorOversize(field string, s *metav1.LabelSelector, lim Limits) string {
	if n := len(s.MatchLabels) + len(s.MatchExpressions); n > lim.MaxSelectorTerms {
		return fmt.Sprintf("%s: %d terms (at most %d)", field, n, lim.MaxSelectorTerms)
	}
	for i, e := range s.MatchExpressions {
		if len(e.Values) > lim.MaxValuesPerTerm {
			return fmt.Sprintf("%s.matchExpressions[%d].values: %d values (at most %d)", field, i, len(e.Values), lim.MaxValuesPerTerm)
		}
	}
	return ""
}

// selector compiles a label selector within the caps.
func selector(s *metav1.LabelSelector, lim Limits) (labels.Selector, error) {
	if why := selectorOversize("", s, lim); why != "" {
		return nil, fmt.Errorf("%s", why[2:])
	}
	return metav1.LabelSelectorAsSelector(s)
}

// policyTypes follows multi-networkpolicy-nftables: absent means Ingress,
// plus Egress when there are egress rules. Values are matched exactly; an
// unknown one isolates both directions (fail closed).
func policyTypes(c *compiled, s *networkingv1.NetworkPolicySpec) [3]bool {
	var iso [3]bool
	if len(s.PolicyTypes) == 0 {
		iso[Ingress] = true
		iso[Egress] = len(s.Egress) > 0
		return iso
	}
	for i, t := range s.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			iso[Ingress] = true
		case networkingv1.PolicyTypeEgress:
			iso[Egress] = true
		default:
			c.note("Invalid", "spec.policyTypes[%d]: %q is neither Ingress nor Egress: both directions are isolated", i, t)
			iso[Ingress], iso[Egress] = true, true
		}
	}
	return iso
}

func (c *compiled) rule(dir Direction, i int, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, lim Limits) crule {
	field := fmt.Sprintf("spec.ingress[%d].from", i)
	if dir == Egress {
		field = fmt.Sprintf("spec.egress[%d].to", i)
	}
	r := crule{dir: dir, index: i, anyPeer: len(peers) == 0, anyPort: len(ports) == 0}
	for j := range peers {
		p, err := compilePeer(&peers[j], lim)
		if err != nil {
			c.note("Invalid", "%s[%d]: %v: the peer matches nothing", field, j, err)
			continue
		}
		r.peers = append(r.peers, p)
	}
	pfield := fmt.Sprintf("spec.ingress[%d].ports", i)
	if dir == Egress {
		pfield = fmt.Sprintf("spec.egress[%d].ports", i)
	}
	for j := range ports {
		p, err := compilePort(&ports[j])
		if err != nil {
			c.note("Invalid", "%s[%d]: %v: the entry matches nothing", pfield, j, err)
			continue
		}
		r.ports = append(r.ports, p)
	}
	return r
}

func compilePeer(p *networkingv1.NetworkPolicyPeer, lim Limits) (cpeer, error) {
	if p.IPBlock != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			return cpeer{}, fmt.Errorf("ipBlock together with a selector")
		}
		return compileIPBlock(p.IPBlock)
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		return cpeer{}, fmt.Errorf("no podSelector, namespaceSelector or ipBlock")
	}
	var out cpeer
	var err error
	if p.PodSelector != nil {
		if out.pod, err = selector(p.PodSelector, lim); err != nil {
			return cpeer{}, fmt.Errorf("podSelector: %w", err)
		}
	}
	if p.NamespaceSelector != nil {
		if out.ns, err = selector(p.NamespaceSelector, lim); err != nil {
			return cpeer{}, fmt.Errorf("namespaceSelector: %w", err)
		}
	}
	return out, nil
}

// compileIPBlock turns cidr minus its excepts into spans. An except that
// does not parse or lies outside the cidr makes the peer match nothing.
func compileIPBlock(b *networkingv1.IPBlock) (cpeer, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return cpeer{}, fmt.Errorf("ipBlock.cidr: %w", err)
	}
	cidr = cidr.Masked()
	var ex []span
	for k, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return cpeer{}, fmt.Errorf("ipBlock.except[%d]: %w", k, err)
		}
		p = p.Masked()
		if p.Addr().Is4() != cidr.Addr().Is4() || p.Bits() < cidr.Bits() || !cidr.Contains(p.Addr()) {
			return cpeer{}, fmt.Errorf("ipBlock.except[%d]: %s is not inside the cidr %s", k, e, cidr)
		}
		ex = append(ex, prefixSpan(p))
	}
	return cpeer{isIP: true, fam: familyIndex(cidr.Addr()), block: subtract(prefixSpan(cidr), mergeSpans(ex))}, nil
}

func compilePort(p *networkingv1.NetworkPolicyPort) (cport, error) {
	out := cport{proto: ProtoTCP}
	if p.Protocol != nil {
		switch *p.Protocol {
		case "TCP":
		case "UDP":
			out.proto = ProtoUDP
		case "SCTP":
			out.proto = ProtoSCTP
		default:
			return cport{}, fmt.Errorf("protocol %q is none of TCP, UDP, SCTP", *p.Protocol)
		}
	}
	if p.Port == nil {
		if p.EndPort != nil {
			return cport{}, fmt.Errorf("endPort without port")
		}
		out.all = true
		return out, nil
	}
	if p.Port.Type == intstr.String {
		if errs := validation.IsValidPortName(p.Port.StrVal); len(errs) > 0 {
			return cport{}, fmt.Errorf("port %q: %s", p.Port.StrVal, errs[0])
		}
		if p.EndPort != nil {
			return cport{}, fmt.Errorf("endPort with the named port %q", p.Port.StrVal)
		}
		out.named = p.Port.StrVal
		return out, nil
	}
	first := int64(p.Port.IntVal)
	last := first
	if p.EndPort != nil {
		last = int64(*p.EndPort)
	}
	if first < 1 || first > 65535 {
		return cport{}, fmt.Errorf("port %d is outside 1-65535", first)
	}
	if last < first || last > 65535 {
		return cport{}, fmt.Errorf("endPort %d is outside %d-65535", last, first)
	}
	out.rng = PortRange{First: uint16(first), Last: uint16(last)}
	return out, nil
}

// selects says whether the policy selects a pod with these labels.
func (c *compiled) selects(l map[string]string) bool {
	return c.sel == nil || c.sel.Matches(labels.Set(l))
}
