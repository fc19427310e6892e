package config

// Fuzz target for nri.conf: every input is either refused with ErrInvalid
// or yields a configuration that validates, and reads back the same when
// written out. Plain `go test` runs the seeds; `make fuzz` runs the target
// for a while.

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	if shipped, err := os.ReadFile("../nri.conf"); err == nil {
		f.Add(shipped)
	}
	laughs := "a: &a [x, x, x, x, x, x, x, x, x]\n"
	for i := 'b'; i <= 'i'; i++ {
		laughs += string(i) + ": &" + string(i) + " [" + strings.Repeat("*"+string(i-1)+", ", 8) + "*" + string(i-1) + "]\n"
	}
	for _, s := range []string{
		"", "\n", "null", "{}", "[]", "1", `"x"`, "---\n---\n", "~",
		`{"confDir":"/etc/nri-cni/net.d","networks":["a","b"],"ifnamePrefix":"x","cniTimeout":"2s","podSelection":true,"requireAnnotation":true}`,
		"networks: [net-a, net-b]\npodCapabilities: [bandwidth, ips]\npodCNIArgs: [vlan, ips]\nlimits: {maxNetworksPerPod: 8, maxAnnotationBytes: 4096}\n",
		"kubernetes:\n  npwgAnnotation: true\n  sharedNamespaces: [shared]\n  maxNADConfigBytes: 2048\n  nadPolicy:\n" +
			"    default: {types: [bridge, host-local], bridges: [\"br-*\"], ipamRanges: [10.0.0.0/8], paths: [/run/cni]}\n" +
			"    namespaces: {team-a: {types: [macvlan], masters: [eth1], hostGateway: true, runtimeConfig: true}}\n",
		"kubernetes:\n  nadPolicy:\n    namespaces: {team-a: {}}\n", "kubernetes: {nadPolicy: {default: null}}\n", "kubernetes: null\n",
		"hook: {podNameAnnotations: [a, b], sandboxIDAnnotations: []}\n", "namespaces: {include: [a], exclude: [a]}\n",
		"confDir: ../../etc\n", "stateDir: /var/lib/nri-cni/../../../etc\n", "binDirs: []\n", "binDirs: null\n", "logFile: x\n",
		"networks: [../../etc]\n", "networks: [" + strings.Repeat("n,", 3000) + "n]\n", "ifnamePrefix: nét\n", "ifnamePrefix: ''\n",
		"cniTimeout: 1e-999999999s\n", "cniTimeout: 9999999999999999999h\n", "cniTimeout: 1500\n", "cniTimeout: -1s\n", "statusInterval: 0s\n",
		"limits: {maxNetworksPerPod: 1e400}\n", "limits: {maxNetworksPerPod: 99999999999999999999}\n", "limits: {maxNetworksPerPod: -1}\n",
		"limits: {maxAnnotationBytes: 262145}\n", "limits: {maxNetworksPerPod: 1.5}\n",
		"ConfDir: /x\n", "CONFDIR: /x\n", "confdir: /x\nconfDir: /y\n", "confDir: /x\nconfDir: /y\n", "bogus: 1\n", "hook: {bogus: 1}\n",
		"kubernetes: {nadPolicy: {namespaces: {team-a: {types: [x], bogus: 1}}}}\n", "kubernetes: {nadPolicy: {namespaces: {'../x': {types: []}}}}\n",
		"podCapabilities: [bandwidth, bandwidth]\n", "podCNIArgs: [ips]\n", "podCNIArgs: ['a/b']\n",
		"confDir: !!binary L2V0Yw==\n", "confDir: &x /a\ncacheDir: *x\n", "? [a]\n: b\n", "{\"a\":1,\"a\":2}", "\ufeffconfDir: /x\n",
		laughs, strings.Repeat("[", 1000), strings.Repeat("- ", 1000) + "x\n", "networks: [\"" + strings.Repeat("a", 30<<10) + "\"]\n",
		"\xff\xfe", "confDir: \"/x\x00y\"\n", "logLevel: \"\u0130nfo\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Fatalf("a configuration with an error: %+v", cfg)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a configuration Validate refuses: %v", err)
		}
		out, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("encoding an accepted configuration: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("an accepted configuration written out is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("an accepted configuration reads back differently:\n%+v\n%+v", cfg, again)
		}
	})
}
