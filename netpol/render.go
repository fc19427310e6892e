package netpol

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/nri-cni/nri-cni/netpol/ir"
)

// ndTypes are the ICMPv6 types of neighbour discovery (133-136) and
// multicast listener discovery (130-132, 143): conntrack does not track
// them, so they pass every isolated chain, or IPv6 would break.
var ndTypes = []uint8{130, 131, 132, 133, 134, 135, 136, 143}

// Render computes the rules of one pod from the policies of its namespace.
// It never fails: caches not synced, a namespace with too many policies, a
// chain over a cap or a render over its budget all give deny-all chains,
// and every invalid part of a policy allows nothing; Notes say why. The
// memo (nil: none) shares work between the pods of one snapshot version;
// what it already holds costs no budget, so only a render that runs out of
// budget can depend on what the memo holds (it is then more restrictive
// without it). Zero fields of opts.Limits take DefaultLimits' values.
func Render(t Target, snap Snapshot, opts Options, memo *Memo) (Ruleset, []Note) {
	if !snap.Synced() {
		return DenyAll(t, opts), []Note{{Namespace: t.Namespace, Reason: "NotSynced",
			Message: fmt.Sprintf("pod %s/%s: the MultiNetworkPolicy caches have not synced: every secondary interface is closed", t.Namespace, t.Name)}}
	}
	lim := withDefaults(opts.Limits)
	if memo == nil {
		memo = NewMemo()
	}
	r := &renderer{t: t, snap: snap, opts: opts, lim: lim, memo: memo.view(snap.Version(), lim),
		b: &budget{left: lim.RenderBudget}, local: map[peerKey]*peerSet{}}
	return r.render()
}

// DenyAll closes every interface of the target in both directions: only
// replies to connections made before and IPv6 ND/MLD pass. It is what a
// pod gets before the caches have synced.
func DenyAll(t Target, opts Options) Ruleset {
	var rs Ruleset
	for _, ifc := range t.Interfaces {
		for _, d := range []Direction{Ingress, Egress} {
			rs.Chains = append(rs.Chains, denyChain(ifc.IfName, d))
		}
	}
	return ir.Seal(rs)
}

func denyChain(ifname string, d Direction) Chain {
	return Chain{IfName: ifname, Direction: d, Rules: append(baseRules(), Rule{Verdict: Drop, Comment: "deny all"})}
}

func baseRules() []Rule {
	return []Rule{
		{Established: true, Verdict: Accept, Comment: "replies"},
		{Family: IPv6, Protocol: ProtoICMPv6, ICMPTypes: ndTypes, Verdict: Accept, Comment: "nd, mld"},
	}
}

func withDefaults(l Limits) Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{
		{&l.MaxPoliciesPerNamespace, &d.MaxPoliciesPerNamespace}, {&l.MaxRulesPerPolicy, &d.MaxRulesPerPolicy},
		{&l.MaxPeersPerRule, &d.MaxPeersPerRule}, {&l.MaxPortsPerRule, &d.MaxPortsPerRule},
		{&l.MaxExceptsPerIPBlock, &d.MaxExceptsPerIPBlock}, {&l.MaxSelectorTerms, &d.MaxSelectorTerms},
		{&l.MaxValuesPerTerm, &d.MaxValuesPerTerm}, {&l.MaxAddressesPerPod, &d.MaxAddressesPerPod},
		{&l.MaxRulesPerPod, &d.MaxRulesPerPod}, {&l.RenderBudget, &d.RenderBudget},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

type renderer struct {
	t     Target
	snap  Snapshot
	opts  Options
	lim   Limits
	memo  view
	b     *budget
	local map[peerKey]*peerSet
	notes []Note
	// budgetNoted: one BudgetExceeded note per Render.
	budgetNoted bool
}

type chainKey struct {
	ifname string
	dir    Direction
}

func (r *renderer) render() (Ruleset, []Note) {
	pols := r.snap.Policies(r.t.Namespace)
	if len(pols) > r.lim.MaxPoliciesPerNamespace {
		for _, p := range pols[r.lim.MaxPoliciesPerNamespace:] {
			r.notes = append(r.notes, Note{Namespace: p.Namespace, Policy: p.Name, Reason: "CapExceeded",
				Message: fmt.Sprintf("namespace %s has %d MultiNetworkPolicies (at most %d): every pod of the namespace is closed on its secondary interfaces",
					p.Namespace, len(pols), r.lim.MaxPoliciesPerNamespace)})
		}
		return DenyAll(r.t, r.opts), r.notes
	}
	applied := map[chainKey][]*compiled{}
	for _, p := range pols {
		c := r.memo.policy(p, r.lim)
		r.notes = append(r.notes, c.notes...)
		if len(c.nets) == 0 {
			continue
		}
		if !r.b.spend(1) {
			// Selection itself ran out: close every interface.
			r.noteBudget()
			return DenyAll(r.t, r.opts), r.notes
		}
		if !c.selects(r.t.Labels) {
			continue
		}
		for _, ifc := range r.t.Interfaces {
			if !c.nets.matches(ifc.Identity) {
				continue
			}
			for _, d := range []Direction{Ingress, Egress} {
				if c.isolates[d] {
					k := chainKey{ifc.IfName, d}
					applied[k] = append(applied[k], c)
				}
			}
		}
	}
	// Chains in the order finish sorts them: the per-pod caps fill
	// deterministically.
	keys := make([]chainKey, 0, len(applied))
	for k := range applied {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b chainKey) int {
		if c := strings.Compare(a.ifname, b.ifname); c != 0 {
			return c
		}
		return int(a.dir) - int(b.dir)
	})
	var rs Ruleset
	var tab tally
	for _, k := range keys {
		rs.Chains = append(rs.Chains, r.chain(k, applied[k], &tab))
	}
	return ir.Seal(rs), r.notes
}

// tally counts what the table holds so far, against the per-pod caps.
type tally struct{ rules, addrs int }

func ruleAddrs(rl *Rule) int { return len(rl.Addrs) + len(rl.AddrPorts) }

// chain renders one (interface, direction): the fixed head, the policies'
// rules in policy order, and the final drop. Over a per-pod cap, or out of
// budget, the chain is deny-all.
func (r *renderer) chain(k chainKey, pols []*compiled, tab *tally) Chain {
	rules := r.head(k.dir)
	contrib := map[*compiled][2]int{}
	for _, c := range pols {
		for i := range c.rules[k.dir] {
			out, ok := r.rule(c, &c.rules[k.dir][i])
			if !ok {
				r.noteBudget()
				deny := denyChain(k.ifname, k.dir)
				tab.rules += len(deny.Rules)
				return deny
			}
			n := contrib[c]
			for j := range out {
				n[0]++
				n[1] += ruleAddrs(&out[j])
			}
			contrib[c] = n
			rules = append(rules, out...)
		}
	}
	rules = append(rules, Rule{Verdict: Drop, Comment: "default deny"})
	addrs := 0
	for i := range rules {
		addrs += ruleAddrs(&rules[i])
	}
	cap, which := "", 0
	switch {
	case tab.rules+len(rules) > r.lim.MaxRulesPerPod:
		cap = fmt.Sprintf("%d rules in the pod's table (maxRulesPerPod %d)", tab.rules+len(rules), r.lim.MaxRulesPerPod)
	case tab.addrs+addrs > r.lim.MaxAddressesPerPod:
		cap, which = fmt.Sprintf("%d addresses in the pod's table (maxAddressesPerPod %d)", tab.addrs+addrs, r.lim.MaxAddressesPerPod), 1
	}
	if cap != "" {
		var most *compiled
		for _, c := range pols {
			if most == nil || contrib[c][which] > contrib[most][which] {
				most = c
			}
		}
		r.notes = append(r.notes, Note{Namespace: most.pol.Namespace, Policy: most.pol.Name, Reason: "CapExceeded",
			Message: fmt.Sprintf("pod %s/%s %s %s: %s; the policy contributing most is %s/%s: the chain denies all",
				r.t.Namespace, r.t.Name, k.ifname, k.dir, cap, most.pol.Namespace, most.pol.Name)})
		deny := denyChain(k.ifname, k.dir)
		tab.rules += len(deny.Rules)
		return deny
	}
	tab.rules += len(rules)
	tab.addrs += addrs
	return Chain{IfName: k.ifname, Direction: k.dir, Rules: rules}
}

func (r *renderer) noteBudget() {
	if r.budgetNoted {
		return
	}
	r.budgetNoted = true
	r.notes = append(r.notes, Note{Namespace: r.t.Namespace, Reason: "BudgetExceeded",
		Message: fmt.Sprintf("pod %s/%s: rendering took more than %d selector evaluations (renderBudget): the unfinished chains deny all",
			r.t.Namespace, r.t.Name, r.lim.RenderBudget)})
}

// head is what every isolated chain starts with: replies, ND/MLD, the
// node's ICMP settings and allow entries. The pod's own addresses get no
// rule: its traffic to itself goes over lo, which no chain sees, so an
// accept on a secondary interface would only let in packets that spoof
// the pod's address (and would make the rules depend on the ADD's result,
// a second transaction per attach).
func (r *renderer) head(d Direction) []Rule {
	rules := baseRules()
	if r.opts.AcceptICMP {
		rules = append(rules, Rule{Family: IPv4, Protocol: ProtoICMP, Verdict: Accept, Comment: "acceptICMP"})
	}
	if r.opts.AcceptICMPv6 {
		rules = append(rules, Rule{Family: IPv6, Protocol: ProtoICMPv6, Verdict: Accept, Comment: "acceptICMPv6"})
	}
	for i, a := range r.opts.Allow {
		if a.Direction != d || (len(a.Ports) > 0 && !hasPorts(a.Protocol)) {
			continue
		}
		rl := Rule{Protocol: a.Protocol, Ports: mergePorts(slices.Clone(a.Ports)), Verdict: Accept, Comment: fmt.Sprintf("allow[%d]", i)}
		if len(a.CIDRs) == 0 {
			rules = append(rules, rl)
			continue
		}
		var set addrSet
		for _, p := range a.CIDRs {
			if p.IsValid() {
				set.addSpans(familyIndex(p.Addr()), []span{prefixSpan(p)})
			}
		}
		rules = append(rules, perFamily(rl, set.prefixes())...)
	}
	return rules
}

// perFamily copies rl once per family that has prefixes.
func perFamily(rl Rule, pf [2][]netip.Prefix) []Rule {
	var out []Rule
	for fam, ps := range pf {
		if len(ps) == 0 {
			continue
		}
		c := rl
		c.Family = IPv4 + Family(fam)
		// Shared with the memo and other Rulesets: read-only (clipped, so
		// an append by a consumer copies).
		c.Addrs = slices.Clip(ps)
		out = append(out, c)
	}
	return out
}

func hasPorts(p Protocol) bool { return p == ProtoTCP || p == ProtoUDP || p == ProtoSCTP }

// mergePorts sorts and merges overlapping or adjacent ranges.
func mergePorts(ps []PortRange) []PortRange {
	if len(ps) == 0 {
		return nil
	}
	slices.SortFunc(ps, func(a, b PortRange) int { return int(a.First) - int(b.First) })
	out := ps[:1]
	for _, p := range ps[1:] {
		last := &out[len(out)-1]
		if int(p.First) <= int(last.Last)+1 {
			last.Last = max(last.Last, p.Last)
			continue
		}
		out = append(out, p)
	}
	return out
}
