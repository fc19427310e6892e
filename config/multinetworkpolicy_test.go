package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Every invalid kubernetes.multiNetworkPolicy value is refused with an
// error naming its key; valid ones parse.
func TestMultiNetworkPolicyValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		key      string // "" = valid
	}{
		{"empty section", "{}", ""},
		{"everything", `{enabled: true, acceptICMP: true, acceptICMPv6: true, propagationDelay: 250ms,
			allow: [{direction: ingress, protocol: UDP, ports: ["546", 547, "6000-6900"], cidrs: [fe80::/10, 10.0.0.0/8]},
			        {direction: egress}],
			limits: {maxPoliciesPerNamespace: 4096, maxRulesPerPolicy: 1, renderBudget: 100000000}}`, ""},
		{"delay at the bounds", "{propagationDelay: 10ms}", ""},
		{"delay at the upper bound", "{propagationDelay: 1s}", ""},
		{"delay too short", "{propagationDelay: 9ms}", "kubernetes.multiNetworkPolicy.propagationDelay"},
		{"delay too long", "{propagationDelay: 1001ms}", "kubernetes.multiNetworkPolicy.propagationDelay"},
		{"delay negative", "{propagationDelay: -1s}", "kubernetes.multiNetworkPolicy.propagationDelay"},
		{"delay not a duration", "{propagationDelay: soon}", "kubernetes.multiNetworkPolicy.propagationDelay"},
		{"enabled not a bool", "{enabled: maybe}", "kubernetes.multiNetworkPolicy.enabled"},
		{"unknown key", "{enable: true}", "kubernetes.multiNetworkPolicy.enable"},
		{"unknown limit", "{limits: {maxPolicies: 3}}", "kubernetes.multiNetworkPolicy.limits.maxPolicies"},
		{"negative limit", "{limits: {maxRulesPerPolicy: -1}}", "kubernetes.multiNetworkPolicy.limits.maxRulesPerPolicy"},
		{"limit over its maximum", "{limits: {maxAddressesPerPod: 2000000}}", "kubernetes.multiNetworkPolicy.limits.maxAddressesPerPod"},
		{"budget over its maximum", "{limits: {renderBudget: 100000001}}", "kubernetes.multiNetworkPolicy.limits.renderBudget"},
		{"every limit checked", "{limits: {maxValuesPerTerm: 1025}}", "kubernetes.multiNetworkPolicy.limits.maxValuesPerTerm"},
		{"allow without direction", "{allow: [{protocol: TCP}]}", "kubernetes.multiNetworkPolicy.allow[0].direction"},
		{"allow direction case", "{allow: [{direction: Ingress}]}", "kubernetes.multiNetworkPolicy.allow[0].direction"},
		{"allow bad protocol", "{allow: [{direction: egress, protocol: ICMP}]}", "kubernetes.multiNetworkPolicy.allow[0].protocol"},
		{"allow protocol case", "{allow: [{direction: egress, protocol: tcp}]}", "kubernetes.multiNetworkPolicy.allow[0].protocol"},
		{"ports without protocol", "{allow: [{direction: egress, ports: [53]}]}", "kubernetes.multiNetworkPolicy.allow[0].ports"},
		{"port 0", "{allow: [{direction: egress, protocol: UDP, ports: [0]}]}", "kubernetes.multiNetworkPolicy.allow[0].ports[0]"},
		{"port too big", "{allow: [{direction: egress, protocol: UDP, ports: [53, 65536]}]}", "kubernetes.multiNetworkPolicy.allow[0].ports[1]"},
		{"range reversed", "{allow: [{direction: egress, protocol: UDP, ports: [\"9-8\"]}]}", "kubernetes.multiNetworkPolicy.allow[0].ports[0]"},
		{"port name", "{allow: [{direction: egress, protocol: UDP, ports: [dns]}]}", "kubernetes.multiNetworkPolicy.allow[0].ports[0]"},
		{"port not scalar", "{allow: [{direction: egress, protocol: UDP, ports: [[1]]}]}", "kubernetes.multiNetworkPolicy.allow[0].ports[0]"},
		{"bad cidr", "{allow: [{direction: ingress}, {direction: ingress, cidrs: [fe80::]}]}", "kubernetes.multiNetworkPolicy.allow[1].cidrs[0]"},
		{"cidr host bits", "{allow: [{direction: ingress, cidrs: [10.0.0.1/8]}]}", "kubernetes.multiNetworkPolicy.allow[0].cidrs[0]"},
		{"too many allow entries", "{allow: [" + strings.Repeat("{direction: ingress},", 65) + "]}", "kubernetes.multiNetworkPolicy.allow"},
		{"too many ports", "{allow: [{direction: ingress, protocol: TCP, ports: [" + strings.Repeat("1,", 65) + "]}]}",
			"kubernetes.multiNetworkPolicy.allow[0].ports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := "kubernetes: {multiNetworkPolicy: " + tc.in + "}\n"
			_, err := Parse([]byte(in))
			if tc.key == "" {
				if err != nil {
					t.Fatalf("Parse(%q): %v", in, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("Parse(%q) = %v, want ErrInvalid naming %s", in, err, tc.key)
			}
			// The key named is the one at fault, not a longer one.
			if rest := strings.SplitN(err.Error(), tc.key, 2)[1]; rest != "" && (rest[0] == '.' || rest[0] == '[') &&
				!strings.HasPrefix(tc.key, "kubernetes.multiNetworkPolicy.allow[") {
				t.Errorf("Parse(%q) = %v: names a key below %s", in, err, tc.key)
			}
		})
	}
}

// Defaults: absent or zero values mean the documented defaults (design §5,
// the same numbers as netpol.DefaultLimits, which test/deploy compares).
func TestMultiNetworkPolicyDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("kubernetes: {multiNetworkPolicy: {enabled: true, limits: {maxRulesPerPod: 7}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Kubernetes.MultiNetworkPolicy
	if !c.Kubernetes.MNPOn() {
		t.Error("MNPOn() = false with enabled: true")
	}
	if m.Delay() != 100*time.Millisecond {
		t.Errorf("Delay() = %s, want 100ms", m.Delay())
	}
	want := DefaultMNPLimits()
	want.MaxRulesPerPod = 7
	if got := m.EffectiveLimits(); got != want {
		t.Errorf("EffectiveLimits() = %+v, want %+v", got, want)
	}
	if (DefaultMNPLimits() != MNPLimits{MaxPoliciesPerNamespace: 128, MaxRulesPerPolicy: 64, MaxPeersPerRule: 64,
		MaxPortsPerRule: 64, MaxExceptsPerIPBlock: 64, MaxSelectorTerms: 32, MaxValuesPerTerm: 64,
		MaxAddressesPerPod: 16384, MaxRulesPerPod: 4096, RenderBudget: 1000000}) {
		t.Errorf("DefaultMNPLimits() = %+v", DefaultMNPLimits())
	}
	for _, k := range []*KubernetesConfig{nil, {}, {MultiNetworkPolicy: &MultiNetworkPolicyConfig{}}} {
		if k.MNPOn() {
			t.Errorf("MNPOn() = true for %+v", k)
		}
	}
	var none *MultiNetworkPolicyConfig
	if none.Delay() != 100*time.Millisecond || none.EffectiveLimits() != DefaultMNPLimits() {
		t.Error("a nil section has the defaults")
	}
}

func TestPortSpecRange(t *testing.T) {
	t.Parallel()
	for in, want := range map[PortSpec][2]uint16{"546": {546, 546}, "1-65535": {1, 65535}, " 80 - 81 ": {80, 81}} {
		lo, hi, err := in.Range()
		if err != nil || lo != want[0] || hi != want[1] {
			t.Errorf("%q.Range() = %d, %d, %v; want %v", in, lo, hi, err, want)
		}
	}
	for _, in := range []PortSpec{"", "-", "0", "1-", "-5", "70000", "5-4", "a", "1-2-3"} {
		if _, _, err := in.Range(); err == nil {
			t.Errorf("%q.Range(): no error", in)
		}
	}
}

// A value a custom unmarshaler refuses (a Duration, a PortSpec) is named by
// its own key, wherever it is: encoding/json names none, and before this
// every such error said "cniTimeout".
func TestDecodeErrorsNameTheirKey(t *testing.T) {
	t.Parallel()
	for in, key := range map[string]string{
		"statusInterval: soon\n": "statusInterval: ",
		"checkInterval: [1]\n":   "checkInterval: ",
		"cniTimeout: abc\n":      "cniTimeout: ",
		"kubernetes: {multiNetworkPolicy: {propagationDelay: x}}\n": "kubernetes.multiNetworkPolicy.propagationDelay: ",
	} {
		_, err := Parse([]byte(in))
		if err == nil || !strings.HasPrefix(strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "), key) {
			t.Errorf("Parse(%q) = %v, want an error starting with %q", in, err, key)
		}
	}
}

// nri.conf documents kubernetes.multiNetworkPolicy in place: its commented
// block, uncommented, parses to the defaults, every key included.
func TestShippedNRIConfDocumentsMultiNetworkPolicy(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../nri.conf")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "\n#   multiNetworkPolicy:")
	if !ok {
		t.Fatal("nri.conf has no commented kubernetes.multiNetworkPolicy block")
	}
	var b strings.Builder
	b.WriteString("kubernetes:\n  multiNetworkPolicy:")
	lines := strings.Split(block, "\n")
	b.WriteString(lines[0] + "\n")
	for _, line := range lines[1:] {
		if !strings.HasPrefix(line, "#  ") {
			break
		}
		b.WriteString(strings.TrimPrefix(line, "#") + "\n")
	}
	c, err := Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("nri.conf's block, uncommented: %v\n%s", err, b.String())
	}
	m := c.Kubernetes.MultiNetworkPolicy
	if m == nil || m.Enabled || m.AcceptICMP || m.AcceptICMPv6 || len(m.Allow) != 0 ||
		m.PropagationDelay != DefaultMNPPropagationDelay || m.Limits != DefaultMNPLimits() {
		t.Errorf("nri.conf's block = %+v, want the defaults", m)
	}
	// Every key of the section is in the block.
	for _, f := range jsonFields(reflect.TypeFor[MultiNetworkPolicyConfig]()) {
		if !strings.Contains(b.String(), " "+f.name+":") {
			t.Errorf("nri.conf does not document kubernetes.multiNetworkPolicy.%s", f.name)
		}
	}
	for _, l := range mnpLimits {
		if !strings.Contains(b.String(), " "+l.key+":") {
			t.Errorf("nri.conf does not document kubernetes.multiNetworkPolicy.limits.%s", l.key)
		}
	}
}
