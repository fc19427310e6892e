// Package policytest is the table of NetworkAttachmentDefinition configs
// that nadpolicy's unit test (the node's verdict) and test/kubeapi's
// equivalence test (the same table against a real API server with the
// generated ValidatingAdmissionPolicy) both judge.
package policytest

import (
	"strings"

	"github.com/nri-cni/nri-cni/config"
)

// Telco stands for the namespace with its own rule; "" for a namespace
// under the default rule. Tests map them to real (unique) names.
const Telco = "telco"

// Verdicts beyond a policy key.
const (
	// Allowed: admitted.
	Allowed = ""
	// Builtin is the key of the built-in rules (escapes, JSON, names).
	Builtin = config.NADPolicyKey
	// Size is the size limit's key.
	Size = config.MaxNADConfigBytesKey
	// VAPAdmits marks the one known case where the admission policy admits
	// what the node refuses: JSON that is malformed inside its outer braces
	// (CEL has no JSON parser). The node refuses it as "not JSON" before any
	// CNI call; no host resource is involved.
	VAPAdmits = "admits"
)

// Case is one config and what each side says.
type Case struct {
	Name string
	// Namespace is "" (default rule) or Telco.
	Namespace string
	Config    string
	// Node is the policy key the node refuses with: a rule's key without
	// its prefix ("types", "bridges"…; the rule follows from Namespace),
	// Builtin, Size, or Allowed.
	Node string
	// VAP is set where the admission policy differs from the node: the
	// rule key it refuses with (it is stricter), or VAPAdmits.
	VAP string
}

// MaxBytes is the size limit the cases assume.
const MaxBytes = 16 << 10

// Policy is the policy the cases are judged by, with the Telco rule under
// telcoNS.
func Policy(telcoNS string) *config.NADPolicy {
	def := config.NADRule{
		Types:      config.DefaultNADTypes(),
		Bridges:    []string{"nad-*"},
		Masters:    []string{},
		Devices:    []string{},
		IPAMRanges: []string{"10.250.0.0/16"},
		Paths:      []string{"/var/lib/cni/nad"},
	}
	telco := config.NADRule{
		Types:         []string{"macvlan", "ipvlan", "host-device", "host-local", "static", "tuning", "portmap"},
		Bridges:       []string{},
		Masters:       []string{"ens2f0", "ens3f?"},
		Devices:       []string{"ens4f1"},
		IPAMRanges:    []string{"10.1.0.0/16", "fd00:10::/64"},
		Paths:         []string{"/run/telco"},
		HostGateway:   true,
		RuntimeConfig: true,
	}
	return &config.NADPolicy{Default: &def, Namespaces: map[string]config.NADRule{telcoNS: telco}}
}

// Key is the full policy key of verdict v for a NAD in namespace ns
// (Allowed and VAPAdmits stay as they are).
func Key(v, ns, telcoNS string) string {
	switch v {
	case Allowed, Builtin, Size, VAPAdmits:
		return v
	}
	if ns == Telco {
		return config.NADPolicyKey + ".namespaces." + telcoNS + "." + v
	}
	return config.NADPolicyKey + ".default." + v
}

const (
	hostLocal = `"ipam":{"type":"host-local","ranges":[[{"subnet":"10.250.1.0/24"}]]}`
	v1        = `{"cniVersion":"1.0.0","name":"n",`
)

// Cases returns the table (at least 25 rows; every rule both ways).
func Cases() []Case {
	return []Case{
		{"bridge with a nad- bridge and a range inside", "", v1 + `"type":"bridge","bridge":"nad-br0",` + hostLocal + `}`, Allowed, ""},
		{"conflist bridge+tuning+bandwidth", "", `{"cniVersion":"1.0.0","name":"sec","plugins":[{"type":"bridge","bridge":"nad-x","isGateway":false,"ipMasq":false,` +
			hostLocal + `},{"type":"tuning","capabilities":{"mac":true}},{"type":"bandwidth","capabilities":{"bandwidth":true}}]}`, Allowed, ""},
		{"host-device eth0 (type refused)", "", v1 + `"type":"host-device","device":"eth0"}`, "types", ""},
		{"host-device eth0 in telco", Telco, v1 + `"type":"host-device","device":"eth0"}`, "devices", ""},
		{"host-device ens4f1 in telco", Telco, v1 + `"type":"host-device","device":"ens4f1"}`, Allowed, ""},
		{"host-device by pciBusID in telco", Telco, v1 + `"type":"host-device","pciBusID":"0000:3b:00.1"}`, "devices", ""},
		{"host-device taking the pod's device in telco (capabilities deviceID, CNIDeviceInfoFile)", Telco,
			v1 + `"type":"host-device","capabilities":{"deviceID":true,"CNIDeviceInfoFile":true}}`, Allowed, ""},
		{"host-device by deviceID in telco", Telco, v1 + `"type":"host-device","deviceID":"0000:3b:00.1"}`, "devices", ""},
		{"macvlan without master", "", v1 + `"type":"macvlan","mode":"bridge"}`, "masters", ""},
		{"macvlan on eth0", "", v1 + `"type":"macvlan","master":"eth0"}`, "masters", ""},
		{"macvlan on ens2f0 in telco, static address inside", Telco, v1 + `"type":"macvlan","master":"ens2f0","ipam":{"type":"static","addresses":[{"address":"10.1.2.3/24"}]}}`, Allowed, ""},
		{"ipvlan on ens3f1 in telco (pattern ens3f?)", Telco, v1 + `"type":"ipvlan","master":"ens3f1"}`, Allowed, ""},
		{"ipvlan on ens3f10 in telco", Telco, v1 + `"type":"ipvlan","master":"ens3f10"}`, "masters", ""},
		{"bridge without bridge (cni0)", "", v1 + `"type":"bridge",` + hostLocal + `}`, "bridges", ""},
		{"bridge cni0", "", v1 + `"type":"bridge","bridge":"cni0"}`, "bridges", ""},
		{"bridge named after a nested object", "", v1 + `"type":"bridge",` + hostLocal + `,"bridge":"nad-late"}`, Allowed, ""},
		{"keys sorted as json.Marshal writes them", "", `{"cniVersion":"1.0.0","name":"n","plugins":[{"bridge":"nad-s","ipMasq":false,` + hostLocal +
			`,"isGateway":false,"type":"bridge"},{"capabilities":{"mac":true},"type":"tuning"}]}`, Allowed, ""},
		{"ipvlan master after a nested object in telco", Telco, v1 + `"type":"ipvlan","ipam":{"type":"static","routes":[{"dst":"10.1.0.0/16"}]},"master":"ens2f0"}`, Allowed, ""},
		{"bridge named after a value nested 7 deep", "", v1 + `"type":"bridge","x":[[[[[[[1]]]]]]],"bridge":"nad-deep"}`, Allowed, "bridges"},
		{"a second bridge type after the bridge", "", v1 + `"type":"bridge","bridge":"nad-a","type":"bridge"}`, Allowed, "bridges"},
		{"macvlan master after a value nested 6 deep in telco", Telco, v1 + `"type":"macvlan","x":[[[[[[1]]]]]],"master":"ens2f0"}`, Allowed, ""},
		{"subnet in the pod range", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/16"}]]}}`, "ipamRanges", ""},
		{"subnet larger than the range", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.0.0.0/8"}}`, "ipamRanges", ""},
		{"rangeStart outside", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","ranges":[[{"subnet":"10.250.1.0/24","rangeStart":"10.96.0.1"}]]}}`, "ipamRanges", ""},
		{"static address outside", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"static","addresses":[{"address":"10.244.1.5/24"}]}}`, "ipamRanges", ""},
		{"args.cni.ips outside", "", v1 + `"type":"bridge","bridge":"nad-a","args":{"cni":{"ips":["10.96.0.10"]}},` + hostLocal + `}`, "ipamRanges", ""},
		{"args.cni.ips inside", "", v1 + `"type":"bridge","bridge":"nad-a","args":{"cni":{"ips":["10.250.1.10/24"]}},` + hostLocal + `}`, Allowed, ""},
		{"IPv6 subnet inside in telco", Telco, v1 + `"type":"macvlan","master":"ens2f0","ipam":{"type":"host-local","subnet":"fd00:10::/80"}}`, Allowed, ""},
		{"IPv6 subnet outside in telco", Telco, v1 + `"type":"macvlan","master":"ens2f0","ipam":{"type":"host-local","subnet":"fd00:11::/64"}}`, "ipamRanges", ""},
		{"IPv4-mapped IPv6 gateway", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.250.0.0/24","gateway":"::ffff:10.250.0.1"}}`, "ipamRanges", ""},
		{"dataDir /etc", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.250.2.0/24","dataDir":"/etc"}}`, "paths", ""},
		{"dataDir escaping with ..", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.250.2.0/24","dataDir":"/var/lib/cni/nad/../../../../etc"}}`, "paths", ""},
		{"dataDir under the allowed prefix", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.250.2.0/24","dataDir":"/var/lib/cni/nad/team-a"}}`, Allowed, ""},
		{"dataDir beside the allowed prefix", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.250.2.0/24","dataDir":"/var/lib/cni/nadx"}}`, "paths", ""},
		{"relative dataDir", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.250.2.0/24","dataDir":"etc/cron.d"}}`, "paths", ""},
		{"logFile under /run/telco in telco", Telco, v1 + `"type":"macvlan","master":"ens2f0","logFile":"/run/telco/m.log"}`, Allowed, ""},
		{"runtimeConfig", "", v1 + `"type":"bridge","bridge":"nad-a","runtimeConfig":{"ips":["10.250.1.9"]}}`, "runtimeConfig", ""},
		{"runtimeConfig in telco", Telco, v1 + `"type":"macvlan","master":"ens2f0","runtimeConfig":{"mac":"02:00:00:00:00:01"}}`, Allowed, ""},
		{"isGateway true", "", v1 + `"type":"bridge","bridge":"nad-a","isGateway":true}`, "hostGateway", ""},
		{"ipMasq true", "", v1 + `"type":"bridge","bridge":"nad-a","ipMasq": true}`, "hostGateway", ""},
		{"isDefaultGateway false", "", v1 + `"type":"bridge","bridge":"nad-a","isDefaultGateway":false}`, Allowed, ""},
		{"portmap", "", `{"cniVersion":"1.0.0","name":"pm","plugins":[{"type":"bridge","bridge":"nad-a"},{"type":"portmap","capabilities":{"portMappings":true}}]}`, "types", ""},
		{"portmap in telco", Telco, `{"cniVersion":"1.0.0","name":"pm","plugins":[{"type":"macvlan","master":"ens2f0"},{"type":"portmap","capabilities":{"portMappings":true}}]}`, Allowed, ""},
		{"ipam type dhcp", "", v1 + `"type":"bridge","bridge":"nad-a","ipam":{"type":"dhcp"}}`, "types", ""},
		{"type escaped as \\u0074ype", "", v1 + `"\u0074ype":"host-device","device":"eth0"}`, Builtin, ""},
		{"escaped value", "", v1 + `"type":"bri\u0064ge","bridge":"nad-a"}`, Builtin, ""},
		{"empty config", "", ``, Allowed, ""},
		{"whitespace config", "", " \n\t\u00a0\u2003", Allowed, ""},
		{"name with slashes", "", `{"cniVersion":"1.0.0","name":"../../../../etc/cron.d","type":"bridge","bridge":"nad-a"}`, Builtin, ""},
		{"whitespace before the colon", "", v1 + ` "type" :"host-device" , "device":"ens4f1"}`, "types", ""},
		{"newlines around the colon", "", v1 + "\n\"type\"\n:\n\t\"host-device\"}", "types", ""},
		{"key in capitals", "", v1 + `"TYPE":"host-device"}`, "types", ""},
		{"Master in another case", "", v1 + `"type":"macvlan","Master":"eth0"}`, "masters", ""},
		{"master spelled with a long s (Go folds it)", "", v1 + `"type":"macvlan","maſter":"eth0"}`, "masters", ""},
		{"duplicate type: the second one counts too", "", v1 + `"type":"bridge","bridge":"nad-a","type":"host-device"}`, "types", ""},
		{"type not a string", "", v1 + `"type":5}`, "types", ""},
		{"not JSON", "", `not json`, Builtin, ""},
		{"a JSON list", "", `[{"type":"bridge"}]`, Builtin, ""},
		{"malformed inside the braces", "", v1 + `"type":"bridge","bridge":"nad-a",}`, Builtin, VAPAdmits},
		{"near the size limit", "", big(MaxBytes - 64), Allowed, ""},
		{"near the size limit, all address values (CEL cost)", "", fill(MaxBytes-64, v1+`"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","ranges":[[`,
			`{"subnet":"10.250.1.0/24","gateway":"10.250.1.1"}`, `]]}}`), Allowed, ""},
		{"near the size limit, all plugins (CEL cost)", "", fill(MaxBytes-64, `{"cniVersion":"1.0.0","name":"n","plugins":[`,
			`{"type":"bridge","bridge":"nad-a","isGateway":false}`, `]}`), Allowed, ""},
		{"near the size limit, all paths (CEL cost)", "", fill(MaxBytes-64, v1+`"type":"tuning","x":[`, `"/var/lib/cni/nad/a/b/c"`, `]}`), Allowed, ""},
		{"near the size limit, last plugin refused", "", fill(MaxBytes-128, `{"cniVersion":"1.0.0","name":"n","plugins":[`,
			`{"type":"tuning"}`, `,{"type":"host-device","device":"eth0"}]}`), "types", ""},
		{"over the size limit in bytes, not in characters", "", v1 + `"type":"bridge","bridge":"nad-a","description":"` +
			strings.Repeat("é", MaxBytes/2) + `"}`, Size, ""},
		{"just over the size limit", "", big(MaxBytes + 1), Size, ""},
	}
}

// big is an allowed config of about n bytes (routes pad it).
func big(n int) string {
	return fill(n, v1+`"type":"bridge","bridge":"nad-a","ipam":{"type":"host-local","subnet":"10.250.0.0/24","routes":[`,
		`{"dst":"10.250.128.0/24"}`, `]}}`)
}

// fill is head, as many comma-separated items as fit in n bytes, tail.
func fill(n int, head, item, tail string) string {
	route := item
	var b strings.Builder
	b.WriteString(head)
	for b.Len()+len(route)+1+len(tail) <= n {
		if b.Len() > len(head) {
			b.WriteByte(',')
		}
		b.WriteString(route)
	}
	for b.Len()+len(tail) < n {
		b.WriteByte(' ')
	}
	b.WriteString(tail)
	return b.String()
}
