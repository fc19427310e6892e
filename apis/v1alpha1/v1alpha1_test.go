package v1alpha1

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func config(members string) []byte {
	return []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"` + members + `}`)
}

func i64(v int64) *int64 { return &v }

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		want NetworkConfig
		err  string // a fragment; "" for none
	}{
		{name: "type only", raw: config(""), want: NetworkConfig{APIVersion: APIVersion, Kind: NetworkConfigKind}},
		{name: "every key", raw: config(`,"ips":["10.1.0.5/24"],"mac":"02:00:00:00:00:05","interface":"data0",` +
			`"cni-args":{"vlan":10.50},"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}],` +
			`"bandwidth":{"ingressRate":1000},"default-route":["10.1.0.1"]`),
			want: NetworkConfig{APIVersion: APIVersion, Kind: NetworkConfigKind, IPs: Some([]string{"10.1.0.5/24"}),
				MAC: Some("02:00:00:00:00:05"), Interface: Some("data0"),
				CNIArgs:      Some(map[string]json.RawMessage{"vlan": json.RawMessage(`10.50`)}),
				PortMappings: Some([]PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}),
				Bandwidth:    Some(Bandwidth{IngressRate: i64(1000)}), DefaultRoute: Some([]string{"10.1.0.1"})}},
		{name: "null is given, not absent", raw: config(`,"mac":null`),
			want: NetworkConfig{APIVersion: APIVersion, Kind: NetworkConfigKind, MAC: Opt[string]{Set: true, Null: true}}},
		{name: "wrong version", raw: []byte(`{"apiVersion":"nri-cni.io/v1","kind":"NetworkConfig"}`), err: `want apiVersion "nri-cni.io/v1alpha1"`},
		{name: "no kind", raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1"}`), err: `kind ""`},
		{name: "a value of the wrong type names its key", raw: config(`,"ips":"10.1.0.5/24"`), err: `"ips": json: cannot unmarshal string`},
		{name: "unknown key", raw: config(`,"interfaces":"x"`), err: `key "interfaces" is not one of its keys (ips, mac, interface, cni-args, portMappings, bandwidth, default-route)`},
		{name: "folded key", raw: config(`,"cni-argſ":{}`), err: `key "cni-argſ" is not "cni-args": keys match exactly`},
		{name: "folded kind", raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","KIND":"NetworkConfig"}`), err: `key "KIND" is not "kind"`},
		{name: "twice", raw: config(`,"mac":"02:00:00:00:00:0a","m\u0061c":"02:00:00:00:00:0b"`), err: `key "mac" given twice`},
		{name: "twice in cni-args", raw: config(`,"cni-args":{"a":1,"a":2}`), err: `"cni-args": key "a" given twice`},
		{name: "folded key in bandwidth", raw: config(`,"bandwidth":{"IngressRate":1}`), err: `"bandwidth": key "IngressRate" is not "ingressRate"`},
		{name: "unknown key in a port mapping", raw: config(`,"portMappings":[{"hostPort":1,"containerPort":1},{"port":2}]`),
			err: `"portMappings[1]": key "port" is not one of its keys (hostPort, containerPort, protocol, hostIP)`},
		{name: "the network is the device's", raw: config(`,"name":"n"`), err: `key "name": the network is the allocated device's`},
		{name: "extension key", raw: config(`,"org.example.x":1`), err: `a NetworkConfig takes no extension keys`},
		{name: "too big", raw: config(`,"interface":"` + strings.Repeat("a", 100) + `"`), err: "more than 64 (limits.maxAnnotationBytes)"},
		{name: "not an object", raw: []byte(`"x"`), err: "not a JSON object"},
		{name: "data after it", raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"}{}`), err: "data after it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			max := 1024
			if tc.name == "too big" {
				max = 64
			}
			got, err := Decode(tc.raw, max)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestUnsupportedKeysWrapErrUnsupported(t *testing.T) {
	for _, k := range []string{"ipam-claim-reference", "infiniband-guid"} {
		_, err := Decode(config(`,"`+k+`":"x"`), 1024)
		assert.True(t, errors.Is(err, ErrUnsupported), "%s: %v", k, err)
	}
	_, err := Decode(config(`,"name":"x"`), 1024)
	assert.False(t, errors.Is(err, ErrUnsupported), "name is refused, not unsupported: %v", err)
}

// Merge takes every key: a field it forgot would keep the claim's value
// under a class that sets it.
func TestMergeTakesEveryKeyOfTheLast(t *testing.T) {
	full, err := Decode(config(`,"ips":["10.1.0.5/24"],"mac":"02:00:00:00:00:05","interface":"data0",`+
		`"cni-args":{"vlan":"10"},"portMappings":[{"hostPort":8080,"containerPort":80}],"bandwidth":{"ingressRate":1000},`+
		`"default-route":["10.1.0.1"]`), 1024)
	require.NoError(t, err)
	v := reflect.ValueOf(full)
	for f := range v.Type().Fields() {
		if f.Name == "APIVersion" || f.Name == "Kind" {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			var only NetworkConfig // full's value of this key alone
			reflect.ValueOf(&only).Elem().FieldByIndex(f.Index).Set(v.FieldByIndex(f.Index))
			got := reflect.ValueOf(Merge(NetworkConfig{}, only)).FieldByIndex(f.Index).Interface()
			assert.Equal(t, v.FieldByIndex(f.Index).Interface(), got, "the later config's key")

			null := reflect.New(f.Type).Elem()
			null.FieldByName("Set").SetBool(true)
			null.FieldByName("Null").SetBool(true)
			var nulled NetworkConfig
			reflect.ValueOf(&nulled).Elem().FieldByIndex(f.Index).Set(null)
			merged := Merge(full, nulled)
			assert.True(t, reflect.ValueOf(merged).FieldByIndex(f.Index).Interface().(interface{ IsZero() bool }).IsZero(),
				"a later null takes the key away")
			out, err := json.Marshal(merged)
			require.NoError(t, err)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			assert.NotContains(t, string(out), `"`+name+`"`, "a key taken away is not written")

			kept := reflect.ValueOf(Merge(full, NetworkConfig{})).FieldByIndex(f.Index).Interface()
			assert.Equal(t, v.FieldByIndex(f.Index).Interface(), kept, "an absent key keeps the earlier value")
		})
	}
}

func TestMarshalWritesOnlyGivenKeys(t *testing.T) {
	c, err := Decode(config(`,"interface":"data0","mac":null,"bandwidth":{"egressRate":5},"cni-args":{"n":1.50}`), 1024)
	require.NoError(t, err)
	c.APIVersion, c.Kind = "", ""
	out, err := json.Marshal(c)
	require.NoError(t, err)
	assert.JSONEq(t, `{"interface":"data0","bandwidth":{"egressRate":5},"cni-args":{"n":1.50}}`, string(out))
	assert.Contains(t, string(out), `1.50`, "cni-args' values as written")
}

// FuzzDecode: whatever the bytes, Decode does not panic, and a config it
// accepts writes out (without its null keys) as a config that decodes to
// the same keys.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{``, `,"mac":null`, `,"cni-args":{"a":1e3}`, `,"bandwidth":{"ingressRate":1}`,
		`,"portMappings":[{"hostPort":1,"containerPort":2,"hostIP":"::1"}]`, `,"MAC":"x"`, `,"ips":[]`, `} {`} {
		f.Add(config(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Decode(raw, 4096)
		if err != nil {
			return
		}
		out, err := json.Marshal(c)
		require.NoError(t, err)
		again, err := Decode(out, 1<<20)
		require.NoError(t, err, "%s", out)
		out2, err := json.Marshal(again)
		require.NoError(t, err)
		assert.JSONEq(t, string(out), string(out2))
	})
}
