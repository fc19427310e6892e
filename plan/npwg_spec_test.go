package plan

// The NPWG multi-network spec v1.3's own examples (section 4), written as
// cases here: what each selects, and the runtimeConfig the spec says the
// delegating plugin passes.

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNPWGSpecV13Examples(t *testing.T) {
	const ns = "my-namespace"
	for _, tc := range []struct {
		section, in string
		want        []NetworkSelection
		// caps: the runtimeConfig of the last element, as the spec's
		// "transform the data into" snippet shows it.
		caps map[string]any
		err  error
	}{
		{section: "4.1.1 comma-delimited", in: "net-a,net-b,other-ns/net-c",
			want: []NetworkSelection{{Ref: NADRef{ns, "net-a"}}, {Ref: NADRef{ns, "net-b"}}, {Ref: NADRef{"other-ns", "net-c"}}}},
		// The prefix of "ips" is optional (1.2.3.4 has none).
		{section: "4.1.2 JSON list", in: `[{"name":"net-a"},{"name":"net-b","ips":["1.2.3.4"],"mac":"aa:bb:cc:dd:ee:ff"},{"name":"net-c","namespace":"other-ns"}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-a"}}, {Ref: NADRef{ns, "net-b"}, IPs: []string{"1.2.3.4"}, MAC: "aa:bb:cc:dd:ee:ff"},
				{Ref: NADRef{"other-ns", "net-c"}}}},
		{section: "4.1.2.1.3.1 ips", in: `[{"name":"net-b","ips":["10.2.2.42/24","2001:db8::5/64"]}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-b"}, IPs: []string{"10.2.2.42/24", "2001:db8::5/64"}}},
			caps: map[string]any{"ips": []string{"10.2.2.42/24", "2001:db8::5/64"}}},
		{section: "4.1.2.1.4.1 mac", in: `[{"name":"net-b","mac":"02:23:45:67:89:01"}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-b"}, MAC: "02:23:45:67:89:01"}},
			caps: map[string]any{"mac": "02:23:45:67:89:01"}},
		{section: "4.1.2.1.6.1 cni-args", in: `[{"name":"net-b","cni-args":{"spoofchk":"on"}}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-b"}, CNIArgs: map[string]any{"spoofchk": "on"}}}, caps: map[string]any{}},
		{section: "4.1.2.1.7.1 portMappings", in: `[{"name":"net-b","portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-b"}, PortMappings: []portMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}}},
			caps: map[string]any{"portMappings": []portMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}}},
		// The spec's example carries comments (not JSON): here without.
		{section: "4.1.2.1.8.1 bandwidth", in: `[{"name":"net-b","bandwidth":{"ingressRate":2048,"ingressBurst":300,"egressRate":8000,"egressBurst":200}}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-b"}, Bandwidth: map[string]any{"ingressRate": int64(2048), "ingressBurst": int64(300),
				"egressRate": int64(8000), "egressBurst": int64(200)}}}},
		{section: "4.1.2.1.9.1 default-route", in: `[{"name":"net-a"},{"name":"net-b","default-route":["10.0.0.1"]}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-a"}}, {Ref: NADRef{ns, "net-b"}, DefaultRoute: []net.IP{net.ParseIP("10.0.0.1")}}},
			caps: map[string]any{}},
		{section: "4.1.2.1.9 default-route: this list may be empty", in: `[{"name":"net-a"},{"name":"net-b","default-route":[]}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-a"}}, {Ref: NADRef{ns, "net-b"}}}},
		// nri-cni has no InfiniBand support: refused, not dropped.
		{section: "4.1.2.1.10.1 infiniband-guid", in: `[{"name":"net-b","infiniband-guid":"24:8a:07:03:00:8d:ae:2f"}]`, err: ErrUnsupportedField},
		// Implementations without IPAMClaims ignore it.
		{section: "4.1.2.1.11.1 ipam-claim-reference", in: `[{"name":"net-a"},{"name":"net-b","ipam-claim-reference":"vm123.tenantblue"}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-a"}}, {Ref: NADRef{ns, "net-b"}, IPAMClaim: "vm123.tenantblue"}},
			caps: map[string]any{}},
		{section: "4.1.2.1.11 ips and ipam-claim-reference together", in: `[{"name":"net-b","ips":["10.0.0.5/24"],"ipam-claim-reference":"vm123.tenantblue"}]`,
			err: ErrBadAnnotation},
		// Keys in reverse domain name notation are other implementations'.
		{section: "4.1.2.1 extension keys", in: `[{"name":"net-b","org.foo.bar.key-name":{"x":1},"mac":"02:23:45:67:89:01"}]`,
			want: []NetworkSelection{{Ref: NADRef{ns, "net-b"}, MAC: "02:23:45:67:89:01", Extensions: []string{"org.foo.bar.key-name"}}}},
		{section: "4.2.2 the same network twice", in: "net-a,net-a",
			want: []NetworkSelection{{Ref: NADRef{ns, "net-a"}}, {Ref: NADRef{ns, "net-a"}}}},
	} {
		t.Run(tc.section, func(t *testing.T) {
			got, err := ParseNPWGNetworks(tc.in, ns, 32)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				assert.Contains(t, err.Error(), `element 1 (network "net-b")`)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if tc.caps != nil {
				assert.Equal(t, tc.caps, got[len(got)-1].caps())
			}
		})
	}
}
