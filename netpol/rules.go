package netpol

import (
	"fmt"
	"slices"
)

// rule renders one policy rule for one chain. It gives nothing when the
// rule's peers resolve to no address or its ports to no port (an empty
// "from"/"to" or "ports" means every address or port). ok is false when
// the budget ran out.
func (r *renderer) rule(c *compiled, cr *crule) ([]Rule, bool) {
	k := peerKey{keyOf(c.pol), cr.dir, cr.index}
	// Only an ingress rule with a named port depends on the target.
	shared := cr.dir == Egress || !slices.ContainsFunc(cr.ports, func(p cport) bool { return p.named != "" })
	if shared {
		if out, ok := r.memo.rules(k); ok {
			return out, true
		}
	}
	out, ok := r.renderRule(c, cr, k)
	if ok && shared {
		r.memo.keepRules(k, out)
	}
	return out, ok
}

// renderRule does rule's work: peers, then ports per protocol, then
// egress named ports as (address, protocol, port) triples.
func (r *renderer) renderRule(c *compiled, cr *crule, k peerKey) ([]Rule, bool) {
	comment := fmt.Sprintf("%s/%s %s[%d]", c.pol.Namespace, c.pol.Name, cr.dir, cr.index)
	var ps *peerSet
	if !cr.anyPeer {
		var ok bool
		if ps, ok = r.peers(c, cr, k); !ok {
			return nil, false
		}
	}
	emit := func(rl Rule) []Rule {
		if cr.anyPeer {
			return []Rule{rl}
		}
		return perFamily(rl, ps.prefixes)
	}
	if cr.anyPort {
		return emit(Rule{Verdict: Accept, Comment: comment}), true
	}
	all := map[Protocol]bool{}
	ranges := map[Protocol][]PortRange{}
	var named []cport
	for _, p := range cr.ports {
		switch {
		case p.all:
			all[p.proto] = true
		case p.named == "":
			ranges[p.proto] = append(ranges[p.proto], p.rng)
		case cr.dir == Ingress:
			// The target's own container port of that name and protocol.
			for _, np := range r.t.NamedPorts {
				if np.Name == p.named && np.Protocol == p.proto && np.Port != 0 {
					ranges[p.proto] = append(ranges[p.proto], PortRange{First: np.Port, Last: np.Port})
				}
			}
		default:
			named = append(named, p)
		}
	}
	var out []Rule
	for _, proto := range []Protocol{ProtoTCP, ProtoUDP, ProtoSCTP} {
		if !all[proto] && len(ranges[proto]) == 0 {
			continue
		}
		rl := Rule{Protocol: proto, Verdict: Accept, Comment: comment}
		if !all[proto] {
			rl.Ports = mergePorts(ranges[proto])
		}
		out = append(out, emit(rl)...)
	}
	if len(named) == 0 {
		return out, true
	}
	// Egress to a named port: each destination pod's own port of that
	// name, as (address, protocol, port) triples.
	dests := ps
	if cr.anyPeer {
		var ok bool
		if dests, ok = r.peers(c, nil, peerKey{k.pol, cr.dir, -1}); !ok {
			return nil, false
		}
	}
	var aps [2][]AddrPort
	for _, pod := range dests.pods {
		for _, np := range pod.NamedPorts {
			for _, p := range named {
				if np.Name != p.named || np.Protocol != p.proto || np.Port == 0 {
					continue
				}
				for id, addrs := range pod.Addrs {
					if !c.nets.matches(id) {
						continue
					}
					for _, a := range addrs {
						if a.IsValid() {
							a = a.Unmap()
							aps[familyIndex(a)] = append(aps[familyIndex(a)], AddrPort{Addr: a, Protocol: p.proto, Port: np.Port})
						}
					}
				}
			}
		}
	}
	for fam := range aps {
		if len(aps[fam]) == 0 {
			continue
		}
		slices.SortFunc(aps[fam], compareAddrPort)
		out = append(out, Rule{Family: IPv4 + Family(fam), AddrPorts: slices.Compact(aps[fam]), Verdict: Accept, Comment: comment})
	}
	return out, true
}

func compareAddrPort(a, b AddrPort) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if a.Protocol != b.Protocol {
		return int(a.Protocol) - int(b.Protocol)
	}
	return int(a.Port) - int(b.Port)
}

// peers is a rule's peer set (cr nil: every peer of the cluster), computed
// once per Render and, through the memo, once per snapshot version.
func (r *renderer) peers(c *compiled, cr *crule, k peerKey) (*peerSet, bool) {
	if ps, ok := r.local[k]; ok {
		return ps, true
	}
	ps, ok := r.memo.peerSet(k, func() (*peerSet, bool) {
		if cr == nil {
			return allPeers(c, r.snap, r.b)
		}
		return computePeers(c, cr, r.snap, r.b)
	})
	if ok {
		r.local[k] = ps
	}
	return ps, ok
}
