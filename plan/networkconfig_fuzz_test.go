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
			"portMappings": "PortMappings", "bandwidth": "Bandwidth", "cni-args": "CNIArgs"}
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

// The documented keys, written out here as the oracle.
var (
	documentedKeys       = []string{"ips", "mac", "interface", "cni-args", "portMappings", "bandwidth", "default-route"}
	documentedNestedKeys = []string{"ingressRate", "ingressBurst", "egressRate", "egressBurst", "hostPort", "containerPort", "protocol", "hostIP"}
)

// members are the keys and values of the JSON object data, in order; an
// error for anything else, a key given twice among them.
func members(data []byte) ([][2]any, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	var out [][2]any
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		key := t.(string)
		if seen[key] {
			return nil, errors.New("key given twice: " + key)
		}
		seen[key] = true
		out = append(out, [2]any{key, v})
	}
	return out, nil
}

// assertExact fails unless every key of config (and of its bandwidth and
// portMappings objects) is exactly a documented one, each once; it returns
// the config's keys besides apiVersion and kind.
func assertExact(t *testing.T, config []byte) []string {
	t.Helper()
	ms, err := members(config)
	if err != nil {
		t.Fatalf("accepted %s: %v", config, err)
	}
	var keys []string
	for _, m := range ms {
		key, value := m[0].(string), m[1].(json.RawMessage)
		if key == "apiVersion" || key == "kind" {
			continue
		}
		if !slices.Contains(documentedKeys, key) {
			t.Fatalf("accepted key %q", key)
		}
		keys = append(keys, key)
		var nested []json.RawMessage
		switch key {
		case "bandwidth":
			nested = []json.RawMessage{value}
		case "portMappings":
			_ = json.Unmarshal(value, &nested)
		}
		for _, n := range nested {
			if !strings.HasPrefix(strings.TrimSpace(string(n)), "{") {
				continue
			}
			inner, err := members(n)
			if err != nil {
				t.Fatalf("accepted %s in %q: %v", n, key, err)
			}
			for _, im := range inner {
				if !slices.Contains(documentedNestedKeys, im[0].(string)) {
					t.Fatalf("accepted key %q in %q", im[0], key)
				}
			}
		}
	}
	return keys
}
