package plan

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

func netConf(body string) ClaimConfig {
	return ClaimConfig{Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"` + body + `}`)}
}

func classConf(body string) ClaimConfig {
	c := netConf(body)
	c.FromClass = true
	return c
}

func TestParseNetworkConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		configs []ClaimConfig
		want    NetworkSelection
		err     error
		msg     string // a fragment of the error
	}{
		{name: "none"},
		{name: "type only", configs: []ClaimConfig{netConf(``), classConf(`,"mac":null`)}},
		{name: "every key", configs: []ClaimConfig{netConf(`,"interface":"data0","ips":["10.1.0.5/24"],"mac":"02:00:00:00:00:05",` +
			`"default-route":["10.1.0.1"],"cni-args":{"team":"a"},"bandwidth":{"ingressRate":1000000,"ingressBurst":1000},` +
			`"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`)},
			want: NetworkSelection{Interface: "data0", IPs: []string{"10.1.0.5/24"}, MAC: "02:00:00:00:00:05",
				CNIArgs: map[string]any{"team": "a"}, Bandwidth: map[string]any{"ingressRate": int64(1000000), "ingressBurst": int64(1000)},
				PortMappings: []portMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}},
				DefaultRoute: []net.IP{net.ParseIP("10.1.0.1")}}},
		{name: "the class wins over the claim, key by key",
			configs: []ClaimConfig{classConf(`,"mac":"02:00:00:00:00:0a"`), netConf(`,"interface":"data0","mac":"02:00:00:00:00:0b"`),
				netConf(`,"interface":"data1"`)},
			want: NetworkSelection{Interface: "data1", MAC: "02:00:00:00:00:0a"}},
		{name: "wrong kind", configs: []ClaimConfig{{Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"Other"}`)}},
			err: ErrBadClaimConfig, msg: `the claim's config: apiVersion "nri-cni.io/v1alpha1" kind "Other"`},
		{name: "unknown key", configs: []ClaimConfig{netConf(`,"interfaces":"x"`)},
			err: ErrBadClaimConfig, msg: `key "interfaces" is not one of its keys (ips, mac, interface, cni-args, portMappings, bandwidth, default-route)`},
		{name: "name is the device's", configs: []ClaimConfig{netConf(`,"name":"other"`)},
			err: ErrBadClaimConfig, msg: `key "name": the network is the allocated device's`},
		{name: "bad mac names the key", configs: []ClaimConfig{netConf(`,"mac":"zz"`)},
			err: ErrBadClaimConfig, msg: `"mac" "zz"`},
		{name: "bad key in the class config names it", configs: []ClaimConfig{classConf(`,"ips":[]`)},
			err: ErrBadClaimConfig, msg: `the DeviceClass's config: "ips"`},
		{name: "eth0", configs: []ClaimConfig{netConf(`,"interface":"eth0"`)},
			err: ErrBadClaimConfig, msg: `"interface" "eth0" is not a usable interface name`},
		{name: "unsupported key", configs: []ClaimConfig{netConf(`,"infiniband-guid":"x"`)},
			err: ErrUnsupportedField, msg: `"infiniband-guid"`},
		// nri-cni's own API stays strict where the NPWG annotation follows
		// the spec's rule for input other implementations read too.
		{name: "ipam-claim-reference is refused, not ignored", configs: []ClaimConfig{netConf(`,"ipam-claim-reference":"vm1"`)},
			err: ErrUnsupportedField, msg: `key "ipam-claim-reference" not supported by nri-cni: no IPAMClaim support`},
		{name: "ipam-claim-reference in another case", configs: []ClaimConfig{netConf(`,"IPAM-Claim-Reference":"vm1"`)},
			err: ErrBadClaimConfig, msg: `key "IPAM-Claim-Reference" is not "ipam-claim-reference": keys match exactly`},
		{name: "an empty ipam-claim-reference too", configs: []ClaimConfig{netConf(`,"ipam-claim-reference":""`)},
			err: ErrUnsupportedField, msg: `key "ipam-claim-reference"`},
		{name: "extension keys are refused, not ignored", configs: []ClaimConfig{netConf(`,"org.example.foo":1`)},
			err: ErrBadClaimConfig, msg: `the claim's config: key "org.example.foo": a NetworkConfig takes no extension keys`},
		{name: "extension keys in the class's config", configs: []ClaimConfig{classConf(`,"io.kubevirt.x":true`)},
			err: ErrBadClaimConfig, msg: `the DeviceClass's config: key "io.kubevirt.x"`},
		{name: "name in another case", configs: []ClaimConfig{netConf(`,"Name":"other"`)},
			err: ErrBadClaimConfig, msg: `key "Name" is not "name": keys match exactly`},
		// Keys match exactly (issue 28, item 8): encoding/json would fill
		// cni-args from "cni-argſ" (U+017F folds to s) and, the merge
		// seeing two keys, the claim's would win over the class's.
		{name: "folded key does not override the class's", configs: []ClaimConfig{
			classConf(`,"cni-args":{"vlan":"10"}`), netConf("," + `"cni-arg\u017f":{"vlan":"99"}`)},
			err: ErrBadClaimConfig, msg: `the claim's config: key "cni-argſ" is not "cni-args": keys match exactly`},
		{name: "folded key written raw", configs: []ClaimConfig{netConf(`,"cni-argſ":{"vlan":"99"}`)},
			err: ErrBadClaimConfig, msg: `key "cni-argſ" is not "cni-args"`},
		{name: "capitalised key", configs: []ClaimConfig{classConf(`,"mac":"02:00:00:00:00:0a"`), netConf(`,"MAC":"02:00:00:00:00:0b"`)},
			err: ErrBadClaimConfig, msg: `key "MAC" is not "mac"`},
		{name: "Kelvin sign", configs: []ClaimConfig{{Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","\u212aind":"NetworkConfig"}`)}},
			err: ErrBadClaimConfig, msg: `is not "kind"`},
		{name: "a key given twice", configs: []ClaimConfig{netConf(`,"mac":"02:00:00:00:00:0a","mac":"02:00:00:00:00:0b"`)},
			err: ErrBadClaimConfig, msg: `key "mac" given twice`},
		{name: "a key given twice through an escape", configs: []ClaimConfig{netConf(`,"mac":"02:00:00:00:00:0a","m\u0061c":"02:00:00:00:00:0b"`)},
			err: ErrBadClaimConfig, msg: `key "mac" given twice`},
		{name: "folded key inside bandwidth", configs: []ClaimConfig{netConf(`,"bandwidth":{"ingressRate":1000,"ingressburst":10}`)},
			err: ErrBadClaimConfig, msg: `"bandwidth": key "ingressburst" is not "ingressBurst"`},
		{name: "folded key inside portMappings", configs: []ClaimConfig{netConf(`,"portMappings":[{"hostPort":80,"containerPort":80},{"HostPort":81,"containerPort":81}]`)},
			err: ErrBadClaimConfig, msg: `"portMappings[1]": key "HostPort" is not "hostPort"`},
		{name: "cni-args key given twice", configs: []ClaimConfig{netConf(`,"cni-args":{"a":1,"a":2}`)},
			err: ErrBadClaimConfig, msg: `"cni-args": key "a" given twice`},
		{name: "interfaceRequest is the annotation's", configs: []ClaimConfig{netConf(`,"interfaceRequest":"data0"`)},
			err: ErrBadClaimConfig, msg: `key "interfaceRequest": the NPWG annotation's old name for "interface"`},
		{name: "apiVersion in another case", configs: []ClaimConfig{{Raw: []byte(`{"APIVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"}`)}},
			err: ErrBadClaimConfig, msg: `key "APIVersion" is not "apiVersion"`},
		{name: "data after the object", configs: []ClaimConfig{{Raw: []byte(`{"apiVersion":"nri-cni.io/v1alpha1","kind":"NetworkConfig"} {}`)}},
			err: ErrBadClaimConfig, msg: "not a JSON object: data after it"},
		// A class takes a key away from the claim by setting it to null.
		{name: "the class's null wins", configs: []ClaimConfig{classConf(`,"mac":null,"cni-args":null`),
			netConf(`,"interface":"data0","mac":"02:00:00:00:00:0b","cni-args":{"vlan":"99"}`)},
			want: NetworkSelection{Interface: "data0"}},
		{name: "the class's cni-args win whole", configs: []ClaimConfig{classConf(`,"cni-args":{"vlan":"10"}`),
			netConf(`,"cni-args":{"vlan":"99","extra":"x"}`)},
			want: NetworkSelection{CNIArgs: map[string]any{"vlan": "10"}}},
		// The keys' values follow the annotation's rules (the same code).
		{name: "ips without prefix, empty default-route", configs: []ClaimConfig{netConf(`,"ips":["10.1.0.5"],"default-route":[]`)},
			want: NetworkSelection{IPs: []string{"10.1.0.5"}}},
		{name: "too big", configs: []ClaimConfig{netConf(`,"cni-args":{"x":"` + strings.Repeat("a", 600) + `"}`)},
			err: ErrBadClaimConfig, msg: "more than 512 (limits.maxAnnotationBytes)"},
		{name: "not an object", configs: []ClaimConfig{{Raw: []byte(`[1]`)}}, err: ErrBadClaimConfig, msg: "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNetworkConfig(`ResourceClaim team/c request "net"`, tc.configs, 512)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.ErrorIs(t, err, ErrBadClaimConfig)
				assert.Contains(t, err.Error(), tc.msg)
				assert.Contains(t, err.Error(), `ResourceClaim team/c request "net"`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func device(claim, request, network string, configs ...ClaimConfig) state.ClaimDevice {
	return state.ClaimDevice{Ref: state.ClaimRef{Namespace: "team", Name: claim, UID: "uid-" + claim, Request: request,
		Driver: "nri-cni.io", Pool: "node-1", Device: "dev-" + network}, Network: network, Configs: configs}
}

// unrecorded is ForPod's stand-in for a claim the kubelet holds as prepared
// without a record.
func unrecorded(claim, why string) state.ClaimDevice {
	return state.ClaimDevice{Ref: state.ClaimRef{Namespace: "team", Name: claim, UID: "uid-" + claim, Driver: "nri-cni.io"},
		Unrecorded: why}
}

// unjudged is d standing in while the kubelet's checkpoint cannot be read.
func unjudged(d state.ClaimDevice) state.ClaimDevice {
	d.Unjudged = "/k/dra_manager_state: version 2"
	return d
}

// unplacedRecord stands in for an unreadable record no attachment record
// names: its claim's namespace is unknown.
func unplacedRecord() state.ClaimDevice {
	return state.ClaimDevice{Ref: state.ClaimRef{UID: "uid-x", Driver: "nri-cni.io"}, Unrecorded: "its record is unreadable"}
}

// TestPlanClaims: a pod's prepared claims become attachments after its
// annotation's, under the same gates.
func TestPlanClaims(t *testing.T) {
	alpha, beta := network(t, "alpha", "mac"), network(t, "beta")
	red := network(t, "cni-red", "ips")
	local := func() []*cni.Network { return []*cni.Network{alpha, beta} }
	cat := Catalogue{Local: local, NADs: nads{{"team", "red"}: red, {"other", "x"}: network(t, "cni-x")}}
	kube := func(c *config.Config) {
		c.PodSelection, c.RequireAnnotation = true, true
		c.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true}
		c.PodCapabilities = []string{"mac"}
	}
	for _, tc := range []struct {
		name    string
		tune    func(*config.Config)
		ann     map[string]string
		claims  []state.ClaimDevice
		ifnames []string // "network@ifname"
		err     error
		msg     string
	}{
		{name: "a claim without an annotation (requireAnnotation)", claims: []state.ClaimDevice{device("c1", "net", "alpha")},
			ifnames: []string{"alpha@net1"}},
		{name: "two claims and a NAD claim", claims: []state.ClaimDevice{device("c1", "net", "alpha"),
			device("c2", "a", "team/red"), device("c2", "b", "beta", netConf(`,"interface":"data0"`))},
			ifnames: []string{"alpha@net1", "cni-red@net2", "beta@data0"}},
		{name: "after the NPWG annotation", ann: map[string]string{AnnotationNPWGNetworks: "red"},
			claims: []state.ClaimDevice{device("c1", "net", "alpha")}, ifnames: []string{"cni-red@net1", "alpha@net2"}},
		{name: "an opted-out annotation does not drop claims", ann: map[string]string{AnnotationNPWGNetworks: ""},
			claims: []state.ClaimDevice{device("c1", "net", "beta")}, ifnames: []string{"beta@net1"}},
		{name: "interface taken by the annotation", ann: map[string]string{AnnotationNPWGNetworks: "red@data0"},
			claims: []state.ClaimDevice{device("c1", "net", "alpha", netConf(`,"interface":"data0"`))},
			err:    ErrBadClaimConfig, msg: `ResourceClaim team/c1 request "net" (device dev-alpha): invalid NetworkConfig: interface "data0" is taken`},
		{name: "NAD of another namespace", claims: []state.ClaimDevice{device("c1", "net", "other/x")},
			err: ErrNamespaceNotAllowed, msg: `ResourceClaim team/c1 request "net"`},
		{name: "capability not allowed", claims: []state.ClaimDevice{device("c1", "net", "team/red", netConf(`,"ips":["10.0.0.5/24"]`))},
			err: ErrCapabilityNotAllowed, msg: `ResourceClaim team/c1 request "net" (device dev-team/red) key "ips"`},
		{name: "capability allowed and declared", claims: []state.ClaimDevice{device("c1", "net", "alpha", netConf(`,"mac":"02:00:00:00:00:01"`))},
			ifnames: []string{"alpha@net1"}},
		{name: "capability not declared", claims: []state.ClaimDevice{device("c1", "net", "beta", netConf(`,"mac":"02:00:00:00:00:01"`))},
			err: ErrCapabilityNotDeclared, msg: `"mac"`},
		{name: "cni-args off", claims: []state.ClaimDevice{device("c1", "net", "beta", netConf(`,"cni-args":{"x":"y"}`))},
			err: ErrCNIArgsNotAllowed, msg: `ResourceClaim team/c1`},
		{name: "an ipam-claim-reference fails the claim (the annotation would ignore it)",
			claims: []state.ClaimDevice{device("c1", "net", "team/red", netConf(`,"ipam-claim-reference":"vm1"`))},
			err:    ErrUnsupportedField, msg: `ResourceClaim team/c1 request "net" (device dev-team/red): invalid NetworkConfig`},
		{name: "an extension key fails the claim (the annotation would ignore it)",
			claims: []state.ClaimDevice{device("c1", "net", "alpha", netConf(`,"org.example.foo":1`))},
			err:    ErrBadClaimConfig, msg: `key "org.example.foo"`},
		{name: "unknown network", claims: []state.ClaimDevice{device("c1", "net", "gamma")},
			err: cni.ErrUnknownNetwork, msg: `ResourceClaim team/c1 request "net"`},
		{name: "unknown NAD", claims: []state.ClaimDevice{device("c1", "net", "team/none")},
			err: ErrNoSuchNAD, msg: `ResourceClaim team/c1`},
		{name: "two default routes", claims: []state.ClaimDevice{
			device("c1", "net", "alpha", netConf(`,"default-route":["10.0.0.1"]`)),
			device("c2", "net", "beta", netConf(`,"default-route":["10.9.0.1"]`))},
			err: ErrBadClaimConfig, msg: "both set the IPv4 default route"},
		{name: "namespace filtered out fails, never drops", tune: func(c *config.Config) { c.Namespaces.Exclude = []string{"team"} },
			claims: []state.ClaimDevice{device("c1", "net", "alpha")}, err: ErrClaimNotAllowed, msg: `namespace "team" is filtered out`},
		// Issue 28, item 9: a claim the kubelet holds as prepared whose
		// record is gone fails the pod, whatever else it asks for.
		{name: "a claim without record fails the pod", ann: map[string]string{AnnotationNPWGNetworks: "red"},
			claims: []state.ClaimDevice{device("c1", "net", "alpha"), unrecorded("c2", "its prepared-claim record /x is missing")},
			err:    ErrClaimRecordMissing,
			msg: "ResourceClaim team/c2 (uid uid-c2): no record of the prepared claim: its prepared-claim record /x is missing; " +
				"the kubelet's checkpoint holds it as prepared by nri-cni.io"},
		{name: "a claim without record alone", claims: []state.ClaimDevice{unrecorded("c2", "unreadable")},
			err: ErrClaimRecordMissing, msg: "ResourceClaim team/c2"},
		// Issue 41, item 7: while the kubelet's checkpoint cannot be read,
		// a claim that may be lost fails the pod, saying why it cannot be
		// judged; one whose pod is unknown does not hold pods of a
		// namespace nri-cni does not serve (no claim was prepared there).
		{name: "a lost claim, the checkpoint unreadable", claims: []state.ClaimDevice{device("c1", "net", "alpha"),
			unjudged(unrecorded("c2", "its prepared-claim record /x is missing"))},
			err: ErrClaimRecordMissing, msg: "ResourceClaim team/c2 (uid uid-c2): no record of the prepared claim: its prepared-claim " +
				"record /x is missing; nri-cni cannot read the kubelet's DRA checkpoint to judge it (/k/dra_manager_state: version 2), " +
				"so the pod does not start without it"},
		{name: "an unplaced record, the checkpoint unreadable", claims: []state.ClaimDevice{unjudged(unplacedRecord())},
			err: ErrClaimRecordMissing, msg: "a prepared claim (uid uid-x) whose pod nri-cni cannot name: no record of the prepared " +
				"claim: its record is unreadable; nri-cni cannot read the kubelet's DRA checkpoint"},
		{name: "an unplaced record does not hold a namespace not served",
			tune:   func(c *config.Config) { c.Namespaces.Exclude = []string{"team"} },
			claims: []state.ClaimDevice{unjudged(unplacedRecord())}},
		{name: "a lost claim in a namespace not served still fails",
			tune:   func(c *config.Config) { c.Namespaces.Exclude = []string{"team"} },
			claims: []state.ClaimDevice{unjudged(unplacedRecord()), unjudged(unrecorded("c2", "missing"))},
			err:    ErrClaimNotAllowed, msg: `ResourceClaim team/c2 request "" (device ): claim not allowed: namespace "team" is filtered out`},
		{name: "limit counts annotation and claims", tune: func(c *config.Config) { c.Limits.MaxNetworksPerPod = 2 },
			ann:    map[string]string{AnnotationNPWGNetworks: "red"},
			claims: []state.ClaimDevice{device("c1", "a", "alpha"), device("c1", "b", "beta")},
			err:    ErrLimit, msg: "the pod's annotations and ResourceClaims: 3 networks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			kube(&cfg)
			if tc.tune != nil {
				tc.tune(&cfg)
			}
			p, err := New(cfg, cat).Plan(context.Background(), Pod{Namespace: "team", Annotations: tc.ann, Claims: tc.claims})
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				assert.Contains(t, err.Error(), tc.msg)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, a := range p.Attachments {
				got = append(got, a.Network.Name+"@"+a.IfName)
				if a.Claim != nil {
					assert.Equal(t, "team", a.Claim.Namespace)
					owner, ok := cni.OwnerOf(a.Network.List.Bytes)
					require.True(t, ok)
					assert.Equal(t, a.Claim.String(), owner.Claim)
				}
			}
			assert.Equal(t, tc.ifnames, got)
		})
	}
}

func TestCheckClaim(t *testing.T) {
	cfg := config.Default()
	cfg.Kubernetes = &config.KubernetesConfig{}
	cfg.Namespaces.Exclude = []string{"kube-system"}
	p := New(cfg, Catalogue{Local: func() []*cni.Network { return []*cni.Network{network(t, "alpha")} }, NADs: nads{}})
	require.NoError(t, p.CheckClaim(device("c1", "net", "alpha")))
	d := device("c1", "net", "alpha")
	d.Ref.Namespace = "kube-system"
	err := p.CheckClaim(d)
	require.ErrorIs(t, err, ErrClaimNotAllowed)
	assert.Contains(t, err.Error(), "ResourceClaim kube-system/c1")
	err = p.CheckClaim(device("c1", "net", "alpha", netConf(`,"mac":"bad"`)))
	require.ErrorIs(t, err, ErrBadClaimConfig)
}
