package netpol

import (
	"fmt"
	"net/netip"

	"github.com/nri-cni/nri-cni/config"
)

// The values of kubernetes.multiNetworkPolicy.allow's direction and protocol.
var (
	configDirections = map[string]Direction{"ingress": Ingress, "egress": Egress}
	configProtocols  = map[string]Protocol{"": ProtoAny, "TCP": ProtoTCP, "UDP": ProtoUDP, "SCTP": ProtoSCTP}
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
		dir, ok := configDirections[a.Direction]
		if !ok {
			return Options{}, fmt.Errorf("%s.direction: %q: want ingress or egress", key, a.Direction)
		}
		proto, ok := configProtocols[a.Protocol]
		if !ok {
			return Options{}, fmt.Errorf("%s.protocol: %q: want TCP, UDP, SCTP or empty", key, a.Protocol)
		}
		out := Allow{Direction: dir, Protocol: proto}
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
