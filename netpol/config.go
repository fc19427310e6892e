package netpol

import (
	"fmt"
	"net/netip"

	"github.com/nri-cni/nri-cni/config"
)

// OptionsFromConfig converts nri.conf's kubernetes.multiNetworkPolicy
// (validated by config.Parse) into the renderer's Options; nil gives the
// defaults. It lives here, not in config: config is the bottom layer and
// imports nothing of ours (docs/architecture.md). Errors name the key; after
// config.Parse there are none.
func OptionsFromConfig(c *config.MultiNetworkPolicyConfig) (Options, error) {
	l := c.EffectiveLimits()
	o := Options{Limits: Limits{
		MaxPoliciesPerNamespace: l.MaxPoliciesPerNamespace,
		MaxRulesPerPolicy:       l.MaxRulesPerPolicy,
		MaxPeersPerRule:         l.MaxPeersPerRule,
		MaxPortsPerRule:         l.MaxPortsPerRule,
		MaxExceptsPerIPBlock:    l.MaxExceptsPerIPBlock,
		MaxSelectorTerms:        l.MaxSelectorTerms,
		MaxValuesPerTerm:        l.MaxValuesPerTerm,
		MaxAddressesPerPod:      l.MaxAddressesPerPod,
		MaxRulesPerPod:          l.MaxRulesPerPod,
		RenderBudget:            l.RenderBudget,
	}}
	if c == nil {
		return o, nil
	}
	o.AcceptICMP, o.AcceptICMPv6 = c.AcceptICMP, c.AcceptICMPv6
	for i, a := range c.Allow {
		key := fmt.Sprintf("kubernetes.multiNetworkPolicy.allow[%d]", i)
		var out Allow
		switch a.Direction {
		case "ingress":
			out.Direction = Ingress
		case "egress":
			out.Direction = Egress
		default:
			return Options{}, fmt.Errorf("%s.direction: %q: want ingress or egress", key, a.Direction)
		}
		switch a.Protocol {
		case "":
			out.Protocol = ProtoAny
		case "TCP":
			out.Protocol = ProtoTCP
		case "UDP":
			out.Protocol = ProtoUDP
		case "SCTP":
			out.Protocol = ProtoSCTP
		default:
			return Options{}, fmt.Errorf("%s.protocol: %q: want TCP, UDP, SCTP or empty", key, a.Protocol)
		}
		for j, p := range a.Ports {
			first, last, err := p.Range()
			if err != nil {
				return Options{}, fmt.Errorf("%s.ports[%d]: %w", key, j, err)
			}
			out.Ports = append(out.Ports, PortRange{First: first, Last: last})
		}
		for j, s := range a.CIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return Options{}, fmt.Errorf("%s.cidrs[%d]: %q is not a CIDR", key, j, s)
			}
			out.CIDRs = append(out.CIDRs, p.Masked())
		}
		o.Allow = append(o.Allow, out)
	}
	return o, nil
}
