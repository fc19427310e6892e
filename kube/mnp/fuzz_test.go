package mnp

import (
	"strings"
	"testing"
)

// Any pod's network-status is tenant input that reaches every node's peer
// index: whatever it holds, parsing never panics, keeps at most
// maxStatusEntries entries of maxIPsPerEntry valid addresses, and gives
// nothing for what is too long or not JSON (the pod is then no peer: it
// can only lose allowances, never gain any).
func FuzzStatusAddrs(f *testing.F) {
	for _, seed := range []string{
		``, `[]`, `{`, `null`, `[{}]`,
		`[{"name":"ns/net","ips":["10.1.0.5"]}]`,
		`[{"name":"cluster","default":true,"ips":["10.0.0.1"]},{"name":"node-net","ips":["10.2.0.1/24","fd00::1"]}]`,
		`[{"name":"a/b","ips":["::ffff:10.1.0.1","not-an-ip","10.1.0.1/33"]}]`,
		`[{"name":"a/b","ips":[` + strings.Repeat(`"10.0.0.1",`, 40) + `"10.0.0.2"]}]`,
		`[` + strings.Repeat(`{"name":"x/y","ips":["10.9.0.1"]},`, 40) + `{"name":"x/z","ips":["10.9.0.2"]}]`,
		`[{"name":"a/b","ips":"10.0.0.1"}]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		out := statusAddrs(v)
		if len(v) > maxStatusBytes && out != nil {
			t.Fatalf("%d bytes (> %d) parsed", len(v), maxStatusBytes)
		}
		if len(out) > maxStatusEntries {
			t.Fatalf("%d identities (> %d)", len(out), maxStatusEntries)
		}
		total := 0
		for id, addrs := range out {
			if (id.NAD == "") == (id.Node == "") {
				t.Fatalf("identity %+v: want exactly one of NAD and Node", id)
			}
			for _, a := range addrs {
				if !a.IsValid() || a.Is4In6() {
					t.Fatalf("address %v of %v", a, id)
				}
			}
			total += len(addrs)
		}
		if total > maxStatusEntries*maxIPsPerEntry {
			t.Fatalf("%d addresses (> %d)", total, maxStatusEntries*maxIPsPerEntry)
		}
	})
}
