package cni

// Fuzz target for a NetworkAttachmentDefinition's spec.config (tenant
// input, issue 18): Parse, then the owner marker every ADDed list carries.
// Plain `go test` runs the seeds; `make fuzz` runs the target for a while.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func FuzzParse(f *testing.F) {
	bridge := `{"type":"bridge","bridge":"br-a","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}}`
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"net-a","plugins":[` + bridge + `,{"type":"tuning","capabilities":{"mac":true}}]}`,
		`{"cniVersion":"0.4.0","name":"net-a","type":"macvlan","master":"eth1","ipam":{"type":"dhcp"}}`,
		`{"cniVersion":"1.1.0","cniVersions":["1.0.0","9.9.9"],"name":"n","disableCheck":"TRUE","plugins":[{"type":"x"}]}`,
		`{"name":"net-a","plugins":[{"type":"x"}],"nri-cni.io/owner":{"nad":"kube-system/other"}}`,
		`{"name":"net-a","type":"x","nri-cni.io/owner":"forged"}`,
		`{"name":"net-a","Name":"../../etc","type":"x"}`, `{"Name":"../../etc","name":"net-a","type":"x"}`,
		`{"name":"net-a","plugins":[{"type":"bridge","Type":"host-device"}]}`,
		`{"name":"../../../../etc/cron.d","plugins":[{"type":"x"}]}`, `{"name":"..","type":"x"}`, `{"name":".x","type":"x"}`,
		`{"name":"a/b","type":"x"}`, `{"name":"nét","type":"x"}`, `{"name":"\u0000","type":"x"}`, `{"name":"a\xff","type":"x"}`,
		`{"name":"` + strings.Repeat("a", 254) + `","type":"x"}`, `{"name":"net-a","type":"` + strings.Repeat("x", 30<<10) + `"}`,
		`{"name":"net-a","plugins":[]}`, `{"name":"net-a","plugins":null}`, `{"name":"net-a","plugins":[null]}`,
		`{"name":"net-a","plugins":[{}]}`, `{"name":"net-a","plugins":{}}`, `{"name":"net-a"}`, `{"name":1,"type":"x"}`,
		`{"name":"net-a","loadOnlyInlinedPlugins":true}`, `{"name":"net-a","plugins":[{"type":"x"}],"cniVersion":1}`,
		`{"name":"net-a","type":"x","mtu":1e400}`, `{"name":"net-a","type":"x","mtu":12345678901234567890123}`,
		`{"name":"net-a","type":"x","n":-0.0,"e":1E+2}`,
		`{"name":"net-a","type":"x","deep":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `}`,
		`{"name":"net-a","plugins":[` + strings.TrimSuffix(strings.Repeat(`{"type":"x"},`, 300), ",") + `]}`,
		`{"name":"net-a","type":"x"} trailing`, `{"name":"net-a","name":"b","type":"x"}`,
		``, `null`, `[]`, `{}`, `"x"`, `1`, strings.Repeat("[", 10001), // past encoding/json's depth limit
	} {
		f.Add([]byte(s))
	}
	owners := []Owner{{NAD: "ns1/net-a"}, {}}
	f.Fuzz(func(t *testing.T, data []byte) {
		OwnerOf(data) // arbitrary cached bytes: must not panic
		n, err := Parse(data)
		if err != nil {
			if n != nil {
				t.Fatalf("a network with an error: %v", err)
			}
			return
		}
		if !ValidNetworkName(n.Name) || n.Name != n.List.Name {
			t.Fatalf("accepted network name %q (list %q)", n.Name, n.List.Name)
		}
		if len(n.List.Plugins) == 0 {
			t.Fatalf("accepted a network without plugins")
		}
		before := bytes.Clone(n.List.Bytes)
		for _, o := range owners {
			owned, err := n.Owned(o)
			if err != nil {
				t.Fatalf("Owned(%+v) of an accepted config: %v", o, err)
			}
			if !bytes.Equal(n.List.Bytes, before) {
				t.Fatalf("Owned modified the shared network")
			}
			got, ok := OwnerOf(owned.List.Bytes)
			if !ok || got != o {
				t.Fatalf("OwnerOf = %+v, %v; want %+v", got, ok, o)
			}
			list, err := libcni.NetworkConfFromBytes(owned.List.Bytes)
			if err != nil {
				t.Fatalf("owned config does not parse: %v", err)
			}
			if owned.Name != n.Name || list.Name != n.Name || list.CNIVersion != n.List.CNIVersion ||
				len(list.Plugins) != len(n.List.Plugins) {
				t.Fatalf("owned network %q (%q, %s, %d plugins) is not %q (%s, %d plugins)",
					owned.Name, list.Name, list.CNIVersion, len(list.Plugins), n.Name, n.List.CNIVersion, len(n.List.Plugins))
			}
			for i, p := range list.Plugins {
				if p.Network.Type != n.List.Plugins[i].Network.Type || !jsonEqual(t, p.Bytes, n.List.Plugins[i].Bytes) {
					t.Fatalf("plugin %d changed: %s -> %s", i, n.List.Plugins[i].Bytes, p.Bytes)
				}
			}
			orig, marked := fuzzDecode(t, n.List.Bytes), fuzzDecode(t, owned.List.Bytes)
			delete(orig, OwnerKey)
			delete(marked, OwnerKey)
			if !reflect.DeepEqual(orig, marked) {
				t.Fatalf("Owned changed more than the marker:\n%s\n%s", n.List.Bytes, owned.List.Bytes)
			}
		}
	})
}

// fuzzDecode decodes a JSON object keeping numbers exact.
func fuzzDecode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var out map[string]any
	if err := decodeNumbers(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
