package nadpolicy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/nadpolicy/policytest"
)

// nodeVerdict is what nri-cni's NAD source decides: size first, then the
// policy; "" = allowed, else the refusing policy key.
func nodeVerdict(t *testing.T, p *nadpolicy.Policy, ns, cfg string) (string, error) {
	t.Helper()
	err := nadpolicy.CheckSize([]byte(cfg), policytest.MaxBytes)
	if err == nil {
		err = p.Check(ns, []byte(cfg))
	}
	if err == nil {
		return "", nil
	}
	var v *nadpolicy.Violation
	if !errors.As(err, &v) || !errors.Is(err, nadpolicy.ErrRefused) {
		t.Fatalf("error %v (%T) is not a *Violation wrapping ErrRefused", err, err)
	}
	return v.PolicyKey, err
}

// TestCheckCases: the node's verdict on the table test/kubeapi also puts to
// the API server.
func TestCheckCases(t *testing.T) {
	t.Parallel()
	const telcoNS = "telco-ns"
	p, err := nadpolicy.New(policytest.Policy(telcoNS))
	if err != nil {
		t.Fatal(err)
	}
	cases := policytest.Cases()
	if len(cases) < 25 {
		t.Fatalf("%d cases, want at least 25", len(cases))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		ns := "team-a"
		if c.Namespace == policytest.Telco {
			ns = telcoNS
		}
		if seen[c.Name] {
			t.Errorf("case %q twice", c.Name)
		}
		seen[c.Name] = true
		got, err := nodeVerdict(t, p, ns, c.Config)
		if want := policytest.Key(c.Node, c.Namespace, telcoNS); got != want {
			t.Errorf("%s: node refuses with %q (%v), want %q", c.Name, got, err, want)
		}
	}
}

func TestViolationNamesPathValueAndKey(t *testing.T) {
	t.Parallel()
	p, err := nadpolicy.New(policytest.Policy("telco"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, ns, cfg string
		want          nadpolicy.Violation
		msg           string
	}{
		{"range in a conflist", "a", `{"name":"n","plugins":[{"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","ranges":[[{"subnet":"10.96.0.0/12"}]]}}]}`,
			nadpolicy.Violation{Path: "plugins[0].ipam.ranges[0][0].subnet", Value: `"10.96.0.0/12"`, Problem: "is not an IP or CIDR inside the allowed ranges",
				PolicyKey: "kubernetes.nadPolicy.default.ipamRanges", Allowed: "10.250.0.0/16"},
			`spec.config.plugins[0].ipam.ranges[0][0].subnet: "10.96.0.0/12" is not an IP or CIDR inside the allowed ranges (kubernetes.nadPolicy.default.ipamRanges, allowed: 10.250.0.0/16)`},
		{"bridge in telco", "telco", `{"name":"n","type":"bridge","bridge":"nad-a"}`,
			nadpolicy.Violation{Path: "type", Value: `"bridge"`, Problem: "is not an allowed plugin type", PolicyKey: "kubernetes.nadPolicy.namespaces.telco.types",
				Allowed: "macvlan, ipvlan, host-device, host-local, static, tuning, portmap"}, ""},
		{"first violation in document order", "a", `{"name":"n","type":"bridge","bridge":"cni0","isGateway":true}`,
			nadpolicy.Violation{Path: "bridge", Value: `"cni0"`, Problem: "is not an allowed bridge", PolicyKey: "kubernetes.nadPolicy.default.bridges", Allowed: "nad-*"}, ""},
		{"ips element", "a", `{"name":"n","type":"bridge","bridge":"nad-a","args":{"cni":{"ips":["10.250.0.9","10.0.0.1"]}}}`,
			nadpolicy.Violation{Path: "args.cni.ips[1]", Value: `"10.0.0.1"`, Problem: "is not an IP or CIDR inside the allowed ranges",
				PolicyKey: "kubernetes.nadPolicy.default.ipamRanges", Allowed: "10.250.0.0/16"}, ""},
		{"odd key in the path", "a", `{"name":"n","type":"bridge","bridge":"nad-a","x.y":{"z":"/etc/passwd"}}`,
			nadpolicy.Violation{Path: `["x.y"].z`, Value: `"/etc/passwd"`, Problem: "is a host path outside the allowed prefixes",
				PolicyKey: "kubernetes.nadPolicy.default.paths", Allowed: "/var/lib/cni/nad"}, ""},
		{"a key that is a host path", "a", `{"name":"n","type":"tuning","sysctl":{"/proc/sys/kernel/x":"1"}}`,
			nadpolicy.Violation{Path: `sysctl["/proc/sys/kernel/x"]`, Value: `"/proc/sys/kernel/x" (a key)`, Problem: "is a host path outside the allowed prefixes",
				PolicyKey: "kubernetes.nadPolicy.default.paths", Allowed: "/var/lib/cni/nad"}, ""},
		{"escape", "a", `{"name":"n","type":"bri\u0064ge"}`,
			nadpolicy.Violation{Problem: "contains a backslash: JSON escapes are refused, as the admission policy could not see through them",
				PolicyKey: "kubernetes.nadPolicy"},
			`spec.config: contains a backslash: JSON escapes are refused, as the admission policy could not see through them (kubernetes.nadPolicy)`},
		{"trailing data", "a", `{"name":"n"} {}`, nadpolicy.Violation{Problem: "is not JSON: data after the JSON value", PolicyKey: "kubernetes.nadPolicy"}, ""},
		{"runtimeConfig nested", "a", `{"name":"n","plugins":[{"type":"tuning","RuntimeConfig":{}}]}`,
			nadpolicy.Violation{Path: "plugins[0].RuntimeConfig", Problem: "is refused: a static runtimeConfig bypasses podCapabilities",
				PolicyKey: "kubernetes.nadPolicy.default.runtimeConfig", Allowed: "false"}, ""},
		{"vlan without master", "a", `{"name":"n","type":"vlan","vlanId":5}`,
			nadpolicy.Violation{Path: "type", Value: `"vlan"`, Problem: "is not an allowed plugin type", PolicyKey: "kubernetes.nadPolicy.default.types",
				Allowed: "bridge, macvlan, ipvlan, host-local, static, tuning, bandwidth, sbr, vrf"}, ""},
		{"ipvlan with an empty master", "telco", `{"name":"n","type":"ipvlan","master":""}`,
			nadpolicy.Violation{Path: "type", Value: `"ipvlan"`, Problem: `names no "master": a plugin of type ipvlan must name its master (its default is the default-route interface of the node)`,
				PolicyKey: "kubernetes.nadPolicy.namespaces.telco.masters", Allowed: "ens2f0, ens3f?"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := p.Check(tt.ns, []byte(tt.cfg))
			var v *nadpolicy.Violation
			if !errors.As(err, &v) {
				t.Fatalf("Check = %v, want a *Violation", err)
			}
			if *v != tt.want {
				t.Errorf("Violation = %#v\nwant        %#v", *v, tt.want)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("Error() = %s\nwant      %s", err, tt.msg)
			}
		})
	}
}

// The code default (no nadPolicy): only NADs without host resources pass.
func TestCodeDefault(t *testing.T) {
	t.Parallel()
	p, err := nadpolicy.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ cfg, key string }{
		{``, ""},
		{`{"name":"n","type":"tuning"}`, ""},
		{`{"name":"n","type":"ipvlan","master":"eth1"}`, "kubernetes.nadPolicy.default.masters"},
		{`{"name":"n","type":"bridge","bridge":"nad-a"}`, "kubernetes.nadPolicy.default.bridges"},
		{`{"name":"n","type":"tuning","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}`, "kubernetes.nadPolicy.default.ipamRanges"},
		{`{"name":"n","type":"host-device","device":"eth0"}`, "kubernetes.nadPolicy.default.types"},
	} {
		err := p.Check("any", []byte(tt.cfg))
		var v *nadpolicy.Violation
		switch {
		case tt.key == "" && err != nil:
			t.Errorf("%s: %v, want allowed", tt.cfg, err)
		case tt.key != "" && (!errors.As(err, &v) || v.PolicyKey != tt.key):
			t.Errorf("%s: %v, want refused by %s", tt.cfg, err, tt.key)
		}
	}
}

func TestCheckSize(t *testing.T) {
	t.Parallel()
	if err := nadpolicy.CheckSize(make([]byte, 100), 100); err != nil {
		t.Errorf("100 of 100 bytes: %v", err)
	}
	err := nadpolicy.CheckSize(make([]byte, 101), 100)
	if !errors.Is(err, nadpolicy.ErrRefused) || !strings.Contains(err.Error(), "101 bytes, more than 100 (kubernetes.maxNADConfigBytes") {
		t.Errorf("101 of 100 bytes: %v", err)
	}
}

func TestNewRefusesWhatDoesNotCompile(t *testing.T) {
	t.Parallel()
	_, err := nadpolicy.New(&config.NADPolicy{Namespaces: map[string]config.NADRule{"x": {IPAMRanges: []string{"nope"}}}})
	if err == nil || !strings.Contains(err.Error(), "kubernetes.nadPolicy.namespaces.x.ipamRanges[0]") {
		t.Errorf("New = %v", err)
	}
}
