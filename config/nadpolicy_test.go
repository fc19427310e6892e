package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestNADPolicyDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     *NADPolicy
		max      int
	}{
		{"no kubernetes section", "podSelection: true\n", DefaultNADPolicy(), DefaultMaxNADConfigBytes},
		{"kubernetes without nadPolicy", "kubernetes: {}\n", DefaultNADPolicy(), DefaultMaxNADConfigBytes},
		{"nadPolicy without default", "kubernetes: {maxNADConfigBytes: 4096, nadPolicy: {namespaces: {telco: {types: [macvlan], masters: [ens2f0]}}}}\n",
			&NADPolicy{Default: ptr(DefaultNADRule()), Namespaces: map[string]NADRule{"telco": {Types: []string{"macvlan"},
				Masters: []string{"ens2f0"}, Bridges: []string{}, Devices: []string{}, IPAMRanges: []string{}, Paths: []string{}}}}, 4096},
		{"default set: lists not given are empty", "kubernetes: {nadPolicy: {default: {types: [bridge], bridges: ['nad-*'], hostGateway: true}}}\n",
			&NADPolicy{Default: &NADRule{Types: []string{"bridge"}, Bridges: []string{"nad-*"}, Masters: []string{}, Devices: []string{},
				IPAMRanges: []string{}, Paths: []string{}, HostGateway: true}, Namespaces: map[string]NADRule{}}, DefaultMaxNADConfigBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Kubernetes.NADPolicyOrDefault(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("NADPolicyOrDefault = %+v\nwant %+v", got, tt.want)
			}
			if got := cfg.Kubernetes.NADConfigLimit(); got != tt.max {
				t.Errorf("NADConfigLimit = %d, want %d", got, tt.max)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestNADPolicyRule(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte("kubernetes: {nadPolicy: {default: {types: [bridge]}, namespaces: {default: {types: [tuning]}, telco: {types: []}}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Kubernetes.NADPolicyOrDefault()
	for _, tt := range []struct {
		ns, key string
		types   []string
	}{
		{"other", "kubernetes.nadPolicy.default", []string{"bridge"}},
		{"default", "kubernetes.nadPolicy.namespaces.default", []string{"tuning"}},
		{"telco", "kubernetes.nadPolicy.namespaces.telco", []string{}},
	} {
		key, r := p.Rule(tt.ns)
		if key != tt.key || !reflect.DeepEqual(r.Types, tt.types) {
			t.Errorf("Rule(%q) = %s %q, want %s %q", tt.ns, key, r.Types, tt.key, tt.types)
		}
	}
	if got := p.SortedNamespaces(); !reflect.DeepEqual(got, []string{"default", "telco"}) {
		t.Errorf("SortedNamespaces = %q", got)
	}
}

func TestNADPolicyErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, key, msg string }{
		{"default: {types: [bridge, ../bin/sh]}", "kubernetes.nadPolicy.default.types[1]", "not a CNI plugin type"},
		{"default: {types: [bridge, bridge]}", "kubernetes.nadPolicy.default.types[1]", "listed twice"},
		{"default: {types: [], bridges: ['nad-[0-9]']}", "kubernetes.nadPolicy.default.bridges[0]", "interface-name pattern"},
		{"default: {types: [], masters: [averyveryverylongname]}", "kubernetes.nadPolicy.default.masters[0]", "interface-name pattern"},
		{"default: {types: [], devices: ['eth 0']}", "kubernetes.nadPolicy.default.devices[0]", "interface-name pattern"},
		{"namespaces: {telco: {types: [], ipamRanges: [10.1.0.0/16, 10.2.0.1/16]}}", "kubernetes.nadPolicy.namespaces.telco.ipamRanges[1]", "host bits set: write 10.2.0.0/16"},
		{"default: {types: [], ipamRanges: [nonsense]}", "kubernetes.nadPolicy.default.ipamRanges[0]", "not a CIDR"},
		{"default: {types: [], ipamRanges: ['::ffff:10.0.0.0/104']}", "kubernetes.nadPolicy.default.ipamRanges[0]", "IPv4-mapped"},
		{"default: {types: [], paths: [var/lib]}", "kubernetes.nadPolicy.default.paths[0]", "not an absolute path"},
		{"default: {types: [], paths: [/]}", "kubernetes.nadPolicy.default.paths[0]", "every host path"},
		{"default: {types: [], paths: [/var/lib/../../etc]}", "kubernetes.nadPolicy.default.paths[0]", `write "/etc"`},
		{"default: {types: [], paths: [/var/lib/]}", "kubernetes.nadPolicy.default.paths[0]", `write "/var/lib"`},
		{"default: {types: [], paths: [\"/a'b\"]}", "kubernetes.nadPolicy.default.paths[0]", "not an absolute path"},
		{"namespaces: {Telco: {types: []}}", "kubernetes.nadPolicy.namespaces.Telco", "not a Kubernetes namespace"},
		{"namespaces: {telco: {masters: [ens2f0]}}", "kubernetes.nadPolicy.namespaces.telco.types", "missing"},
		{"namespaces: {b: {types: []}, a: {types: [], bogus: 1}}", "kubernetes.nadPolicy.namespaces.a.bogus", "unknown key"},
		{"namespaces: {z: {types: [], zz: 1}, a: {types: [], aa: 1}}", "kubernetes.nadPolicy.namespaces.a.aa", "unknown key"},
		{"default: {tpyes: []}", "kubernetes.nadPolicy.default.tpyes", "unknown key"},
		{"bogus: 1", "kubernetes.nadPolicy.bogus", "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte("kubernetes: {nadPolicy: {" + strings.TrimSuffix(tt.in, "\n") + "}}\n"))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%s) = %v, want ErrInvalid", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Parse(%s) = %v\nwant it to name %s and say %q", tt.in, err, tt.key, tt.msg)
			}
		})
	}
}

func TestMaxNADConfigBytes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in string
		ok bool
	}{{"1024", true}, {"32768", true}, {"0", true}, {"1023", false}, {"32769", false}, {"-1", false}} {
		_, err := Parse([]byte("kubernetes: {maxNADConfigBytes: " + tt.in + "}\n"))
		if tt.ok != (err == nil) {
			t.Errorf("maxNADConfigBytes %s: %v", tt.in, err)
		}
		if err != nil && !strings.Contains(err.Error(), MaxNADConfigBytesKey) {
			t.Errorf("maxNADConfigBytes %s: %v does not name the key", tt.in, err)
		}
	}
}

// kubernetes.maxNADCacheBytes: 0 is the default; a budget under 1 MiB would
// drop real clusters' NADs, one over 1 GiB bounds nothing.
func TestMaxNADCacheBytes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		ok   bool
		want int
	}{
		{"0", true, DefaultMaxNADCacheBytes},
		{"1048576", true, 1 << 20},
		{"33554432", true, 32 << 20},
		{"1073741824", true, 1 << 30},
		{"1048575", false, 0},
		{"1073741825", false, 0},
		{"-1", false, 0},
	} {
		c, err := Parse([]byte("kubernetes: {maxNADCacheBytes: " + tt.in + "}\n"))
		if tt.ok != (err == nil) {
			t.Errorf("maxNADCacheBytes %s: %v", tt.in, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), MaxNADCacheBytesKey) ||
				!strings.Contains(err.Error(), "between 1048576 (1 MiB) and 1073741824 (1 GiB)") {
				t.Errorf("maxNADCacheBytes %s: %v does not name the key and its range", tt.in, err)
			}
			continue
		}
		if got := c.Kubernetes.NADCacheLimit(); got != tt.want {
			t.Errorf("maxNADCacheBytes %s: limit %d, want %d", tt.in, got, tt.want)
		}
	}
	var none *KubernetesConfig
	if none.NADCacheLimit() != DefaultMaxNADCacheBytes {
		t.Errorf("no kubernetes section: limit %d", none.NADCacheLimit())
	}
}
