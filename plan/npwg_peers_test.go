package plan

// Cases modelled on what Multus's annotation parser tests cover
// (pkg/k8sclient: the comma form's names and interfaces, the JSON form,
// bad JSON, default-route) and the NPWG client library's
// (ParseNetworkAnnotation), with Multus's verdict beside nri-cni's. Where
// they differ, why says why nri-cni does so on purpose (docs/kubernetes.md,
// "Multus behaviour vs nri-cni, and why").

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNPWGParserAgainstMultus(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		multus   bool   // Multus v4 accepts it
		ok       bool   // nri-cni accepts it
		msg      string // nri-cni's error, a fragment
		why      string // why nri-cni differs, when it does
	}{
		{name: "comma form", in: "net1,net2", multus: true, ok: true},
		{name: "comma form with namespace", in: "default/net1", multus: true, ok: true},
		{name: "comma form with interface", in: "net1@my_interface", multus: true, ok: true},
		{name: "comma form with both", in: "default/net1@my_interface", multus: true, ok: true},
		{name: "three parts", in: "root@someIP/root@someOtherIP/root@thirdIP", msg: `element 1 ("root@someIP/root@someOtherIP/root@thirdIP")`},
		{name: "two @", in: "root@someIP/root@someOtherIP@garbagevalue", msg: "is not a usable interface name"},
		{name: "@ before the namespace", in: "root@someIP/root@someOtherIP", msg: `"someIP/root@someOtherIP" is not a usable interface name`},
		{name: "space in the interface", in: "default/net1@myIfc Name", msg: `"myIfc Name" is not a usable interface name`},
		{name: "interface too long", in: "default/net1@very_long_interface_name", msg: "is not a usable interface name"},
		{name: "JSON list", in: `[{"name":"net1"},{"name":"net2","default-route":["192.168.2.2"]},{"name":"net3","namespace":"other-ns"}]`,
			multus: true, ok: true},
		{name: "not JSON", in: "[adsfasdfasdfasf]", msg: "not a JSON list of selection elements"},
		{name: "empty default-route", in: `[{"name":"foobar","default-route":[]}]`, multus: true, ok: true},
		{name: "ips without prefix", in: `[{"name":"net2","ips":["1.2.3.4"]}]`, multus: true, ok: true},
		{name: "ips with a bad prefix", in: `[{"name":"net2","ips":["1.2.3.4/40"]}]`, msg: `"1.2.3.4/40"`},
		{name: "the client library's element", in: `[{"name":"test-net-attach-def","interface":"test1"}]`, multus: true, ok: true},
		{name: "unknown keys", in: `[{"name":"net2","ipRequest":"1.2.3.4","macRequest":"aa:bb:cc:dd:ee:ff"}]`, multus: true,
			msg: `key "ipRequest" is not a key of the NPWG spec, write "ips"`, why: "a misspelt key would silently drop what the pod asked for"},
		{name: "a Multus-only key", in: `[{"name":"net2","deviceID":"0000:18:02.5"}]`, multus: true,
			msg: `key "deviceID" not supported by nri-cni: Multus's own key`, why: "not an NPWG key: a pod would pick a host device"},
		{name: "interface eth0", in: "net1@eth0", multus: true, msg: `"eth0" is not a usable interface name`,
			why: "the runtime's interface: refused before any ADD rather than failing in the plugin"},
		{name: "duplicate interface", in: `[{"name":"a","interface":"x1"},{"name":"b","interface":"x1"}]`, multus: true, ok: true,
			why: "parsing accepts it; planning refuses it (TestPlan: interface used twice)"},
		{name: "EUI-64 MAC", in: `[{"name":"net2","mac":"aa:bb:cc:dd:ee:ff:00:11"}]`, multus: true,
			msg: "want a 48-bit Ethernet address", why: "the spec asks for a 6-byte Ethernet MAC"},
		{name: "multicast MAC", in: `[{"name":"net2","mac":"01:00:5e:00:00:01"}]`, multus: true,
			msg: "a multicast address cannot be an interface's", why: "no interface can take it"},
		{name: "a NAD name with dots", in: "net.v1", ok: true,
			why: "NAD names are DNS subdomains; Multus's comma form takes labels only (its JSON form takes dots)"},
		{name: "two IPv4 default routes", in: `[{"name":"a","default-route":["10.0.0.1"]},{"name":"b","default-route":["10.1.0.1"]}]`,
			msg: "already sets the IPv4 default route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.multus != tc.ok {
				require.NotEmpty(t, tc.why, "a difference from Multus needs its reason")
			}
			_, err := ParseNPWGNetworks(tc.in, "default", 32)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), AnnotationNPWGNetworks)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}
