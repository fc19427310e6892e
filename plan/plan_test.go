package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

// nads is a NADSource over a map.
type nads map[NADRef]*cni.Network

func (n nads) Network(ref NADRef) (*cni.Network, error) {
	if net, ok := n[ref]; ok {
		return net, nil
	}
	return nil, fmt.Errorf("%w %s", ErrNoSuchNAD, ref)
}

func network(t *testing.T, name string, caps ...string) *cni.Network {
	t.Helper()
	c := ""
	for i, k := range caps {
		if i > 0 {
			c += ","
		}
		c += fmt.Sprintf("%q:true", k)
	}
	n, err := cni.Parse([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"x","capabilities":{%s}}]}`, name, c)))
	require.NoError(t, err)
	return n
}

// TestPlan: planning as data in (pod, config, catalogue), plan or error out.
func TestPlan(t *testing.T) {
	alpha, beta := network(t, "alpha", "mac", "bandwidth"), network(t, "beta")
	red := network(t, "cni-red", "ips")
	local := func() []*cni.Network { return []*cni.Network{alpha, beta} }
	cat := Catalogue{Local: local, NADs: nads{
		{"team", "red"}: red, {"team", "empty"}: {Name: "beta"}, {"shared", "blue"}: network(t, "cni-blue"),
		{"other", "x"}: network(t, "cni-x")}}
	base := config.Default()
	base.Networks = []string{"alpha"}
	selection := func(c *config.Config) { c.PodSelection, c.RequireAnnotation = true, true }
	kube := func(c *config.Config) {
		selection(c)
		c.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true, SharedNamespaces: []string{"shared"}}
		c.PodCapabilities = config.KnownCapabilities()
	}
	type want struct {
		ifnames []string // "network@ifname"
		skip    string   // a fragment of the skip reason
		err     error
		msg     string
	}
	for _, tc := range []struct {
		name string
		tune func(*config.Config)
		cat  *Catalogue
		ns   string
		ann  map[string]string
		want want
	}{
		{name: "nri.conf's networks", want: want{ifnames: []string{"alpha@net1"}}},
		{name: "namespace filtered out", tune: func(c *config.Config) { c.Namespaces.Exclude = []string{"team"} },
			want: want{skip: `namespace "team" is filtered out`}},
		{name: "opt-in: no annotation", tune: selection, want: want{skip: SkipNotRequested}},
		{name: "own annotation", tune: selection, ann: map[string]string{AnnotationNetworks: "beta, alpha@data0, beta"},
			want: want{ifnames: []string{"beta@net1", "alpha@data0", "beta@net2"}}},
		{name: "own annotation: opted out", tune: selection, ann: map[string]string{AnnotationNetworks: " "},
			want: want{skip: "opted out"}},
		{name: "own annotation: unknown network", tune: selection, ann: map[string]string{AnnotationNetworks: "gamma"},
			want: want{err: ErrBadAnnotation, msg: `unknown network "gamma"`}},
		{name: "own annotation: eth0", tune: selection, ann: map[string]string{AnnotationNetworks: "alpha@eth0"},
			want: want{err: ErrBadAnnotation, msg: `"eth0" is not a usable interface name`}},
		{name: "capability not allowed", tune: selection, ann: map[string]string{AnnotationNetworks: "alpha", AnnotationMAC: "02:00:00:00:00:01"},
			want: want{err: ErrCapabilityNotAllowed, msg: "nri-cni.io/mac"}},
		{name: "limit: networks", tune: selection, ann: map[string]string{AnnotationNetworks: strings.Repeat("alpha,", 32) + "alpha"},
			want: want{err: ErrLimit, msg: "33 networks, more than limits.maxNetworksPerPod"}},
		{name: "limit: bytes", tune: selection, ann: map[string]string{AnnotationMAC: strings.Repeat("x", 17000)},
			want: want{err: ErrLimit, msg: "17000 bytes, more than limits.maxAnnotationBytes"}},
		// Unnamed elements are named by position, as Multus names them.
		{name: "NPWG", tune: kube, cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: `red, shared/blue@b0, empty`},
			want: want{ifnames: []string{"cni-red@net1", "cni-blue@b0", "beta@net3"}}},
		{name: "NPWG: a name taken by position", tune: kube, cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: `red@net2, empty`},
			want: want{err: ErrBadInterface, msg: `"net2" is also element 1's`}},
		{name: "NPWG: another namespace", tune: kube, cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: "other/x"},
			want: want{err: ErrNamespaceNotAllowed, msg: "other/x"}},
		{name: "NPWG: capability not declared", tune: kube, cat: &cat,
			ann:  map[string]string{AnnotationNPWGNetworks: `[{"name":"red","mac":"02:00:00:00:00:01"}]`},
			want: want{err: ErrCapabilityNotDeclared, msg: `"mac"`}},
		{name: "NPWG: cni-args off", tune: kube, cat: &cat,
			ann:  map[string]string{AnnotationNPWGNetworks: `[{"name":"red","cni-args":{"ips":["10.0.0.9"]}}]`},
			want: want{err: ErrCNIArgsNotAllowed, msg: "cni-args are off"}},
		{name: "NPWG and own annotation", tune: kube, cat: &cat,
			ann:  map[string]string{AnnotationNPWGNetworks: "red", AnnotationNetworks: "alpha"},
			want: want{err: ErrBothAnnotations}},
		{name: "Multus owns the NPWG annotation", tune: kube,
			cat:  &Catalogue{Local: local, NADs: cat.NADs, MultusPrimary: func() string { return "/etc/cni/net.d/00-multus.conf" }},
			ann:  map[string]string{AnnotationNPWGNetworks: "red"},
			want: want{skip: "Multus's on this node"}},
		{name: "NPWG off without a source", tune: kube, ann: map[string]string{AnnotationNPWGNetworks: "red"},
			want: want{skip: SkipNotRequested}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			if tc.tune != nil {
				tc.tune(&cfg)
			}
			c := Catalogue{Local: local}
			if tc.cat != nil {
				c = *tc.cat
			}
			p, err := New(cfg, c).Plan(context.Background(), Pod{Namespace: "team", Annotations: tc.ann})
			if tc.want.err != nil {
				require.ErrorIs(t, err, tc.want.err)
				assert.Contains(t, err.Error(), tc.want.msg)
				return
			}
			require.NoError(t, err)
			if tc.want.skip != "" {
				assert.Contains(t, p.Skip, tc.want.skip)
				assert.Empty(t, p.Attachments)
				return
			}
			var got []string
			for _, a := range p.Attachments {
				got = append(got, a.Network.Name+"@"+a.IfName)
			}
			assert.Equal(t, tc.want.ifnames, got)
		})
	}
}

func TestPlanCapabilityArgsAndReadiness(t *testing.T) {
	alpha := network(t, "alpha", "bandwidth")
	ready := &Readiness{}
	cfg := config.Default()
	cfg.Networks = []string{"alpha"}
	p := New(cfg, Catalogue{Local: func() []*cni.Network { return []*cni.Network{alpha} }, NotReady: ready.NotReady})
	pl, err := p.Plan(context.Background(), Pod{Namespace: "team", Annotations: map[string]string{AnnotationIngressBandwidth: "10M"}})
	require.NoError(t, err)
	require.Len(t, pl.Attachments, 1)
	assert.Equal(t, map[string]any{"ingressRate": int64(10_000_000), "ingressBurst": 2147483647},
		pl.Attachments[0].Caps["bandwidth"])
	require.NoError(t, p.CheckReady(pl.Attachments))

	ready.Set(map[string]error{"alpha": errors.New("daemon not running")})
	err = p.CheckReady(pl.Attachments)
	require.ErrorIs(t, err, ErrNetworkNotReady)
	assert.Contains(t, err.Error(), "daemon not running")
}
