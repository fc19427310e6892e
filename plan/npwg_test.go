package plan

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseNPWGCommaForm(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []NetworkSelection
	}{
		{"net-a", []NetworkSelection{{Ref: NADRef{"pods", "net-a"}}}},
		{"other/net-b@eth5", []NetworkSelection{{Ref: NADRef{"other", "net-b"}, Interface: "eth5"}}},
		{" net-a , net-a@net9,x.y", []NetworkSelection{
			{Ref: NADRef{"pods", "net-a"}}, {Ref: NADRef{"pods", "net-a"}, Interface: "net9"}, {Ref: NADRef{"pods", "x.y"}}}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseNPWGNetworks(tc.in, "pods", 32)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseNPWGCommaFormErrorsNameTheElement(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `element 1 ("")`},
		{"a,,b", `element 2 ("")`},
		{"a,b@", `element 2 ("b@")`},
		{"Net_A", `element 1 ("Net_A")`},
		{"a,ns/b@eth0", `element 2 ("ns/b@eth0")`},
		{"a@lo", `element 1 ("a@lo")`},
		{"Bad_NS/a", `element 1 ("Bad_NS/a")`},
		{"/a", `element 1 ("/a")`},
		{`{"name":"a"}`, "single object"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseNPWGNetworks(tc.in, "pods", 32)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrBadAnnotation)
			assert.Contains(t, err.Error(), AnnotationNPWGNetworks)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestParseNPWGJSONEveryField(t *testing.T) {
	in := `[
	  {"name": "net-a"},
	  {"name": "net-b", "namespace": "shared", "interface": "sriov1",
	   "ips": ["10.1.2.3/24", "fd00::3/64"], "mac": "02:00:00:AB:CD:EF",
	   "cni-args": {"vlan": 100, "big": 12345678901234567890, "mode": "bridge", "nested": {"k": [1, 2]}},
	   "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "UDP", "hostIP": "192.0.2.1"}, {"hostPort": 9, "containerPort": 9}],
	   "bandwidth": {"ingressRate": 1000000, "ingressBurst": 2000000, "egressRate": 0, "egressBurst": 0}},
	  {"name": "net-c", "interfaceRequest": "old1", "cni-args": null}
	]`
	got, err := ParseNPWGNetworks(in, "pods", 32)
	require.NoError(t, err)
	require.Len(t, got, 3)

	assert.Equal(t, NetworkSelection{Ref: NADRef{"pods", "net-a"}}, got[0])
	b := got[1]
	assert.Equal(t, NADRef{"shared", "net-b"}, b.Ref)
	assert.Equal(t, "sriov1", b.Interface)
	assert.Equal(t, []string{"10.1.2.3/24", "fd00::3/64"}, b.IPs)
	assert.Equal(t, "02:00:00:ab:cd:ef", b.MAC)
	assert.Equal(t, []portMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "udp", HostIP: "192.0.2.1"},
		{HostPort: 9, ContainerPort: 9, Protocol: "tcp"}}, b.PortMappings)
	assert.Equal(t, map[string]any{"ingressRate": int64(1000000), "ingressBurst": int64(2000000)}, b.Bandwidth)
	// Numbers stay exact (json.Number), nested values intact.
	assert.Equal(t, json.Number("12345678901234567890"), b.CNIArgs["big"])
	assert.Equal(t, json.Number("100"), b.CNIArgs["vlan"])
	assert.Equal(t, map[string]any{"k": []any{json.Number("1"), json.Number("2")}}, b.CNIArgs["nested"])
	assert.Equal(t, map[string]any{
		"ips": b.IPs, "mac": "02:00:00:ab:cd:ef", "portMappings": b.PortMappings, "bandwidth": b.Bandwidth,
	}, b.caps())

	assert.Equal(t, "old1", got[2].Interface, "interfaceRequest is the old name of interface")
	assert.Nil(t, got[2].CNIArgs)
	assert.Empty(t, got[2].caps())
}

func TestParseNPWGJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		sentinel       error
	}{
		{"not json", `[{"name": "a"`, "not a JSON list", ErrBadAnnotation},
		{"empty list", `[]`, "empty list", ErrBadAnnotation},
		{"unknown key", `[{"name":"a"},{"name":"b","macaddr":"x"}]`, `element 2 (network "b"): json: unknown field "macaddr"`, ErrBadAnnotation},
		{"no name", `[{"namespace":"x"}]`, `element 1 (network "?")`, ErrBadAnnotation},
		{"default-route not an IP", `[{"name":"a","default-route":["gw"]}]`, `"default-route": "gw" is not an IP address`, ErrBadAnnotation},
		{"default-route two IPv4", `[{"name":"a","default-route":["10.1.1.1","10.1.1.2"]}]`, "at most one gateway per address family", ErrBadAnnotation},
		{"default-route twice", `[{"name":"a","default-route":["10.1.1.1"]},{"name":"b","default-route":["fd00::1","10.2.2.1"]}]`,
			`element 2 (network "b"): "default-route": element 1 (a) already sets the IPv4 default route`, ErrBadAnnotation},
		{"infiniband", `[{"name":"a","infiniband-guid":"c2:11"}]`, `key "infiniband-guid"`, ErrUnsupportedField},
		{"ipam claim with ips", `[{"name":"a","ips":["10.1.1.1"],"ipam-claim-reference":"c"}]`,
			`"ips" and "ipam-claim-reference" together`, ErrBadAnnotation},
		{"ipam claim not a string", `[{"name":"a","ipam-claim-reference":{"name":"c"}}]`,
			`element 1 (network "a"): json: cannot unmarshal object into Go struct field selectionElement.ipam-claim-reference`, ErrBadAnnotation},
		{"ip not an address", `[{"name":"a","ips":["10.1.1"]}]`, `"ips": "10.1.1" is not an IP address`, ErrBadAnnotation},
		{"ip with a bad prefix", `[{"name":"a","ips":["10.1.1.1/33"]}]`, `"ips": "10.1.1.1/33": want an IP address with an optional prefix`, ErrBadAnnotation},
		{"ip with a zone", `[{"name":"a","ips":["fe80::1%eth0"]}]`, `"ips": "fe80::1%eth0" is not an IP address`, ErrBadAnnotation},
		{"misspelt key", `[{"name":"a","default_route":["10.0.0.1"]}]`, `key "default_route" is not a key of the NPWG spec, write "default-route"`, ErrBadAnnotation},
		{"misspelt key nobody knows", `[{"name":"a","gateway":["10.0.0.1"]}]`, `json: unknown field "gateway"`, ErrBadAnnotation},
		{"dotted key that is no domain", `[{"name":"a","k8s.v1.cni.cncf.io/networks":"b"}]`,
			`json: unknown field "k8s.v1.cni.cncf.io/networks"`, ErrBadAnnotation},
		{"dotted key with an empty label", `[{"name":"a","org..foo":1}]`, `json: unknown field "org..foo"`, ErrBadAnnotation},
		{"leading dot", `[{"name":"a",".ips":1}]`, `json: unknown field ".ips"`, ErrBadAnnotation},
		{"extension key beside a bad one", `[{"name":"a","org.example.x":1,"macaddr":"x"}]`, `json: unknown field "macaddr"`, ErrBadAnnotation},
		{"ips empty", `[{"name":"a","ips":[]}]`, `"ips": an empty list`, ErrBadAnnotation},
		{"multicast mac", `[{"name":"a","mac":"01:00:5e:00:00:01"}]`, `"mac" "01:00:5e:00:00:01": a multicast`, ErrBadAnnotation},
		{"bad port", `[{"name":"a","portMappings":[{"hostPort":0,"containerPort":80}]}]`, `"portMappings": entry 1: ports must be 1-65535`, ErrBadAnnotation},
		{"bad protocol", `[{"name":"a","portMappings":[{"hostPort":1,"containerPort":80,"protocol":"icmp"}]}]`, `protocol "icmp"`, ErrBadAnnotation},
		{"rate without burst", `[{"name":"a","bandwidth":{"egressRate":1000000}}]`, `"bandwidth": egressBurst 0`, ErrBadAnnotation},
		{"rate too low", `[{"name":"a","bandwidth":{"ingressRate":10,"ingressBurst":10}}]`, `ingressRate 10`, ErrBadAnnotation},
		{"empty bandwidth", `[{"name":"a","bandwidth":{}}]`, `neither an ingress nor an egress rate`, ErrBadAnnotation},
		{"both interface keys", `[{"name":"a","interface":"x1","interfaceRequest":"x2"}]`, `"interfaceRequest"`, ErrBadAnnotation},
		{"cni-args not object", `[{"name":"a","cni-args":[1]}]`, `element 1 (network "a")`, ErrBadAnnotation},
		{"bad interface", `[{"name":"a","interface":"eth0"}]`, `"eth0" is not a usable interface name`, ErrBadAnnotation},
		{"bad namespace", `[{"name":"a","namespace":"No"}]`, `namespace "No"`, ErrBadAnnotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNPWGNetworks(tc.in, "pods", 32)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.sentinel)
			assert.Contains(t, err.Error(), AnnotationNPWGNetworks)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestNPWGIgnoresWhatTheSpecSaysToIgnore: an ipam-claim-reference (no
// IPAMClaims here) and keys in reverse domain name notation come back as
// ignored instead of failing the pod; other unknown keys still fail it.
func TestNPWGIgnoresWhatTheSpecSaysToIgnore(t *testing.T) {
	got, err := ParseNPWGNetworks(`[
	  {"name": "vm-net", "ipam-claim-reference": "vm123.tenantblue", "interface": "pod16367aacb67"},
	  {"name": "net-b", "io.kubevirt.x": true, "org.example.foo": {"nested": [1]}, "com.example.key_name-2": "v", "mac": "02:00:00:00:00:01"},
	  {"name": "net-c", "ipam-claim-reference": null, "IPAM-Claim-Reference": ""}
	]`, "vms", 32)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, NetworkSelection{Ref: NADRef{"vms", "vm-net"}, Interface: "pod16367aacb67", IPAMClaim: "vm123.tenantblue"}, got[0])
	assert.Empty(t, got[0].caps(), "the claim reaches no plugin")
	assert.Equal(t, NetworkSelection{Ref: NADRef{"vms", "net-b"}, MAC: "02:00:00:00:00:01",
		Extensions: []string{"io.kubevirt.x", "org.example.foo", "com.example.key_name-2"}}, got[1], "extension keys in document order")
	assert.Equal(t, NetworkSelection{Ref: NADRef{"vms", "net-c"}}, got[2], "null or empty: no claim")

	for _, bad := range []string{`{"name":"a","org.example/x":1}`, `{"name":"a","org.":1}`} {
		_, err := ParseNPWGNetworks("["+bad+"]", "vms", 32)
		require.ErrorIs(t, err, ErrBadAnnotation, bad)
		assert.Contains(t, err.Error(), "unknown field", bad)
	}
	// A misspelling of the key: refused, naming the spec's key.
	_, err = ParseNPWGNetworks(`[{"name":"a","ipamClaimReference":"c"}]`, "vms", 32)
	require.ErrorIs(t, err, ErrBadAnnotation)
	assert.Contains(t, err.Error(), `key "ipamClaimReference" is not a key of the NPWG spec, write "ipam-claim-reference"`)
}

// TestNPWGIPsWithoutPrefixPassThrough: "ips" entries may omit the prefix
// length (the spec's own example does); they reach the ips capability as
// written, as Multus passes them.
func TestNPWGIPsWithoutPrefixPassThrough(t *testing.T) {
	got, err := ParseNPWGNetworks(`[{"name":"a","ips":["10.1.2.3"," 10.1.2.4/24 ","2001:db8::5","::ffff:10.0.0.1"]}]`, "pods", 32)
	require.NoError(t, err)
	want := []string{"10.1.2.3", "10.1.2.4/24", "2001:db8::5", "::ffff:10.0.0.1"}
	assert.Equal(t, want, got[0].IPs)
	assert.Equal(t, map[string]any{"ips": want}, got[0].caps())
}

// TestNPWGEmptyDefaultRouteIsANoOp: the spec allows an empty list; it
// moves no route and takes no address family from another element.
func TestNPWGEmptyDefaultRouteIsANoOp(t *testing.T) {
	got, err := ParseNPWGNetworks(`[{"name":"a","default-route":[]},{"name":"b","default-route":["10.0.0.1","fd00::1"]}]`, "pods", 32)
	require.NoError(t, err)
	assert.Nil(t, got[0].DefaultRoute)
	assert.Len(t, got[1].DefaultRoute, 2)
}
