package plan

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzNetworkConfigClassWins: a claim's NetworkConfig under a DeviceClass's
// (issue 28, item 8). Whatever the two configs hold, an accepted pair has
// every key written exactly as documented, once (also inside bandwidth and
// portMappings), and every key the class's config sets comes out as the
// class alone gives it: no spelling of a key in the claim's config reaches
// a field the class pinned. FuzzNetworkConfig (fuzz_test.go) covers the
// claim's config alone.
func FuzzNetworkConfigClassWins(f *testing.F) {
	for _, s := range [][2]string{
		{`,"cni-argſ":{"vlan":"99"}`, `,"cni-args":{"vlan":"10"}`},
		{`,"cni-arg\u017f":{"vlan":"99"}`, `,"cni-args":{"vlan":"10"}`},
		{`,"CNI-ARGS":{"vlan":"99"}`, `,"cni-args":{"vlan":"10"}`},
		{`,"MAC":"02:00:00:00:00:0b"`, `,"mac":"02:00:00:00:00:0a"`},
		{`,"maс":"02:00:00:00:00:0b"`, `,"mac":"02:00:00:00:00:0a"`}, // Cyrillic es
		{`,"mac":"02:00:00:00:00:0b","mac":"02:00:00:00:00:0c"`, `,"mac":"02:00:00:00:00:0a"`},
		{`,"mac":"02:00:00:00:00:0b"`, `,"mac":null`},
		{`,"interface":"data0","ips":["10.1.0.5/24"]`, `,"ips":["10.1.0.9/24"]`},
		{`,"bandwidth":{"ingressRate":1,"ingressBurst":1,"INGRESSRATE":9}`, `,"bandwidth":{"ingressRate":5,"ingressBurst":5}`},
		{`,"portMappings":[{"hostPort":80,"containerPort":80,"hostport":81}]`, `,"interface":"x1"`},
		{`,"default-route":["10.0.0.1"]`, `,"default-route":[]`},
		{`,"interfaceRequest":"x2"`, `,"interface":"x1"`},
		{`,"\u212aind":"NetworkConfig"`, ``},
		{`,"interface":"data0"`, `,"Interface":"data1"`},
		{`} {`, `,"mac":"02:00:00:00:00:0a"`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, claim, class string) {
		wrap := func(members string) []byte {
			return []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"` + members + `}`)
		}
		claimConf := ClaimConfig{Raw: wrap(claim)}
		classConf := ClaimConfig{FromClass: true, Raw: wrap(class)}
		sel, err := ParseNetworkConfig(`ResourceClaim ns1/c request "r"`, []ClaimConfig{classConf, claimConf}, 16<<10)
		if err != nil {
			if !errors.Is(err, ErrBadClaimConfig) {
				t.Fatalf("error is not ErrBadClaimConfig: %v", err)
			}
			return
		}
		classKeys := assertExact(t, classConf.Raw)
		assertExact(t, claimConf.Raw)
		alone, err := ParseNetworkConfig(`ResourceClaim ns1/c request "r"`, []ClaimConfig{classConf}, 16<<10)
		if err != nil {
			t.Fatalf("the pair is accepted, the class's config alone is not: %v", err)
		}
		fields := map[string]string{"interface": "Interface", "ips": "IPs", "mac": "MAC", "default-route": "DefaultRoute",
			ncPortMappings: "PortMappings", ncBandwidth: "Bandwidth", ncCNIArgs: "CNIArgs"}
		got, want := reflect.ValueOf(sel), reflect.ValueOf(alone)
		for _, k := range classKeys {
			name := fields[k]
			if !reflect.DeepEqual(got.FieldByName(name).Interface(), want.FieldByName(name).Interface()) {
				t.Fatalf("the class sets %q, the claim changed it: %v, the class alone %v", k,
					got.FieldByName(name).Interface(), want.FieldByName(name).Interface())
			}
		}
	})
}

// assertExact fails unless every key of config (and of its bandwidth and
// portMappings objects) is exactly a documented one, each once; it returns
// the config's keys besides apiVersion and kind.
func assertExact(t *testing.T, config []byte) []string {
	t.Helper()
	ms, err := objectMembers(config)
	if err != nil {
		t.Fatalf("accepted %s: %v", config, err)
	}
	var keys []string
	for _, m := range ms {
		if m.key == "apiVersion" || m.key == "kind" {
			continue
		}
		if !slices.Contains(networkConfigKeys, m.key) {
			t.Fatalf("accepted key %q", m.key)
		}
		keys = append(keys, m.key)
		var nested []json.RawMessage
		switch m.key {
		case ncBandwidth:
			nested = []json.RawMessage{m.value}
		case ncPortMappings:
			_ = json.Unmarshal(m.value, &nested)
		}
		for _, n := range nested {
			if !strings.HasPrefix(strings.TrimSpace(string(n)), "{") {
				continue
			}
			inner, err := objectMembers(n)
			if err != nil {
				t.Fatalf("accepted %s in %q: %v", n, m.key, err)
			}
			for _, im := range inner {
				if !slices.Contains(bandwidthKeys, im.key) && !slices.Contains(portMappingKeys, im.key) {
					t.Fatalf("accepted key %q in %q", im.key, m.key)
				}
			}
		}
	}
	return keys
}
