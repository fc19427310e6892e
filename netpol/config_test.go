package netpol

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/config"
)

func TestOptionsFromConfig(t *testing.T) {
	t.Parallel()
	parse := func(section string) *config.MultiNetworkPolicyConfig {
		t.Helper()
		c, err := config.Parse([]byte("kubernetes: {multiNetworkPolicy: " + section + "}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return c.Kubernetes.MultiNetworkPolicy
	}
	for _, tc := range []struct {
		name string
		in   *config.MultiNetworkPolicyConfig
		want Options
	}{
		{"absent: the defaults", nil, Options{Limits: DefaultLimits()}},
		{"empty: the defaults", parse("{enabled: true}"), Options{Limits: DefaultLimits()}},
		{"everything", parse(`{acceptICMP: true, acceptICMPv6: true, limits: {maxRulesPerPod: 9, renderBudget: 5},
			allow: [{direction: ingress, protocol: UDP, ports: [546, "6000-6900"], cidrs: [fe80::/10, 10.0.0.0/8]},
			        {direction: egress, protocol: SCTP}, {direction: egress}]}`),
			Options{AcceptICMP: true, AcceptICMPv6: true,
				Limits: func() Limits { l := DefaultLimits(); l.MaxRulesPerPod, l.RenderBudget = 9, 5; return l }(),
				Allow: []Allow{
					{Direction: Ingress, Protocol: ProtoUDP, Ports: []PortRange{{First: 546, Last: 546}, {First: 6000, Last: 6900}},
						CIDRs: []netip.Prefix{netip.MustParsePrefix("fe80::/10"), netip.MustParsePrefix("10.0.0.0/8")}},
					{Direction: Egress, Protocol: ProtoSCTP},
					{Direction: Egress, Protocol: ProtoAny},
				}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := OptionsFromConfig(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("OptionsFromConfig = %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// Unvalidated input (not through config.Parse) is refused naming the key.
	for key, a := range map[string]config.MNPAllow{
		"allow[0].direction": {Direction: "in"},
		"allow[0].protocol":  {Direction: "ingress", Protocol: "ICMP"},
		"allow[0].ports[1]":  {Direction: "ingress", Protocol: "TCP", Ports: []config.PortSpec{"1", "0"}},
		"allow[0].cidrs[0]":  {Direction: "ingress", CIDRs: []string{"x"}},
	} {
		_, err := OptionsFromConfig(&config.MultiNetworkPolicyConfig{Allow: []config.MNPAllow{a}})
		if err == nil || !strings.Contains(err.Error(), "kubernetes.multiNetworkPolicy."+key) {
			t.Errorf("%+v: %v, want an error naming %s", a, err, key)
		}
	}
}

// nri.conf's default limits are the renderer's.
func TestConfigDefaultLimitsAreTheRenderers(t *testing.T) {
	t.Parallel()
	got, err := OptionsFromConfig(&config.MultiNetworkPolicyConfig{Limits: config.DefaultMNPLimits()})
	if err != nil {
		t.Fatal(err)
	}
	if got.Limits != DefaultLimits() {
		t.Errorf("config.DefaultMNPLimits() = %+v, netpol.DefaultLimits() = %+v", got.Limits, DefaultLimits())
	}
}
