package plan

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/state"
)

// TestPlanDefaultNetworks: nri.conf's defaultNetworks come first on every
// pod nri-cni serves, named <ifnamePrefix><1…K> as Multus names its
// defaultNetworks (delegates 1…K, after the cluster network), and what the
// pod asks for is numbered after them; the limit counts them.
func TestPlanDefaultNetworks(t *testing.T) {
	alpha, beta, side := network(t, "alpha", "mac"), network(t, "beta"), network(t, "side")
	red := network(t, "cni-red", "ips")
	local := func() []*cni.Network { return []*cni.Network{alpha, beta, side} }
	nadSource := nads{{"team", "red"}: red, {"kube-system", "sidecar"}: network(t, "cni-sidecar"),
		{"kube-system", "empty"}: {Name: "beta"}}
	cat := Catalogue{Local: local, NADs: nadSource}
	multus := Catalogue{Local: local, NADs: nadSource, MultusPrimary: func() string { return "/etc/cni/net.d/00-multus.conf" }}
	// defaults: one confDir network and one NAD, on top of tune.
	defaults := func(tune func(*config.Config)) func(*config.Config) {
		return func(c *config.Config) {
			if tune != nil {
				tune(c)
			}
			c.DefaultNetworks = []string{"side", "kube-system/sidecar"}
		}
	}
	selection := func(c *config.Config) { c.PodSelection, c.RequireAnnotation = true, true }
	kube := func(c *config.Config) {
		selection(c)
		c.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true}
		c.PodCapabilities = config.KnownCapabilities()
	}
	type want struct {
		ifnames []string // "network@ifname", defaults marked "*"
		skip    string
		err     error
		msg     string
	}
	for _, tc := range []struct {
		name   string
		tune   func(*config.Config)
		cat    *Catalogue
		ns     string
		ann    map[string]string
		claims []state.ClaimDevice
		want   want
	}{
		{name: "before nri.conf's networks", tune: defaults(nil),
			want: want{ifnames: []string{"side@net1*", "cni-sidecar@net2*", "alpha@net3"}}},
		{name: "no annotation, requireAnnotation: the defaults only", tune: defaults(selection),
			want: want{ifnames: []string{"side@net1*", "cni-sidecar@net2*"}}},
		{name: "an empty annotation opts out of the annotation's networks only", tune: defaults(selection),
			ann:  map[string]string{AnnotationNetworks: ""},
			want: want{ifnames: []string{"side@net1*", "cni-sidecar@net2*"}}},
		{name: "own annotation: its unnamed entries after the defaults", tune: defaults(selection),
			ann:  map[string]string{AnnotationNetworks: "beta, alpha@data0, beta"},
			want: want{ifnames: []string{"side@net1*", "cni-sidecar@net2*", "beta@net3", "alpha@data0", "beta@net4"}}},
		{name: "own annotation naming a default's interface", tune: defaults(selection),
			ann:  map[string]string{AnnotationNetworks: "beta@net2"},
			want: want{err: ErrBadAnnotation, msg: `interface "net2" is nri.conf defaultNetworks[1] (kube-system/sidecar)'s`}},
		// Multus: eth0, defaults net1..netK, then element i is net(K+i).
		{name: "NPWG: elements numbered after the defaults, as Multus does", tune: defaults(kube), cat: &cat,
			ann:  map[string]string{AnnotationNPWGNetworks: "red, red@data0, red"},
			want: want{ifnames: []string{"side@net1*", "cni-sidecar@net2*", "cni-red@net3", "cni-red@data0", "cni-red@net5"}}},
		{name: "NPWG: an element naming a default's interface", tune: defaults(kube), cat: &cat,
			ann:  map[string]string{AnnotationNPWGNetworks: "red@net1"},
			want: want{err: ErrBadInterface, msg: `"net1" is nri.conf defaultNetworks[0] (side)'s`}},
		{name: "NPWG: an empty annotation", tune: defaults(kube), cat: &cat,
			ann:  map[string]string{AnnotationNPWGNetworks: ""},
			want: want{ifnames: []string{"side@net1*", "cni-sidecar@net2*"}}},
		{name: "NPWG: the limit counts the defaults", tune: defaults(func(c *config.Config) { kube(c); c.Limits.MaxNetworksPerPod = 4 }),
			cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: "red, red, red"},
			want: want{err: ErrLimit, msg: "annotation k8s.v1.cni.cncf.io/networks and the 2 defaultNetworks of nri.conf: 5 networks, " +
				"more than limits.maxNetworksPerPod in nri.conf allows (4)"}},
		{name: "NPWG: JSON form, the limit counts the defaults", tune: defaults(func(c *config.Config) { kube(c); c.Limits.MaxNetworksPerPod = 4 }),
			cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: `[{"name":"red"},{"name":"red"},{"name":"red"}]`},
			want: want{err: ErrLimit, msg: "5 networks, more than limits.maxNetworksPerPod in nri.conf allows (4)"}},
		{name: "NPWG: within the limit with the defaults", tune: defaults(func(c *config.Config) { kube(c); c.Limits.MaxNetworksPerPod = 4 }),
			cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: "red, red"},
			want: want{ifnames: []string{"side@net1*", "cni-sidecar@net2*", "cni-red@net3", "cni-red@net4"}}},
		{name: "own annotation: the limit counts the defaults", tune: defaults(func(c *config.Config) { selection(c); c.Limits.MaxNetworksPerPod = 3 }),
			ann:  map[string]string{AnnotationNetworks: "beta, beta"},
			want: want{err: ErrLimit, msg: "annotation nri-cni.io/networks and the 2 defaultNetworks of nri.conf: 4 networks"}},
		{name: "claims after the defaults; the limit counts all", tune: defaults(kube), cat: &cat,
			claims: []state.ClaimDevice{device("c1", "net", "alpha")},
			want:   want{ifnames: []string{"side@net1*", "cni-sidecar@net2*", "alpha@net3"}}},
		{name: "claims over the limit with the defaults", tune: defaults(func(c *config.Config) { kube(c); c.Limits.MaxNetworksPerPod = 3 }),
			cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: "red"}, claims: []state.ClaimDevice{device("c1", "net", "alpha")},
			want: want{err: ErrLimit, msg: "with the 2 defaultNetworks of nri.conf: 4 networks"}},
		{name: "a NAD with an empty spec.config: the confDir network", tune: func(c *config.Config) {
			kube(c)
			c.DefaultNetworks = []string{"kube-system/empty"}
		}, cat: &cat, want: want{ifnames: []string{"beta@net1*"}}},
		{name: "defaultNetworksExclude: the pod asks, it gets no default", tune: defaults(func(c *config.Config) {
			kube(c)
			c.DefaultNetworksExclude = []string{"team"}
		}), cat: &cat, ann: map[string]string{AnnotationNPWGNetworks: "red"}, want: want{ifnames: []string{"cni-red@net1"}}},
		{name: "defaultNetworksExclude: nothing asked, nothing attached", tune: defaults(func(c *config.Config) {
			kube(c)
			c.DefaultNetworksExclude = []string{"team"}
		}), cat: &cat, want: want{skip: SkipNotRequested}},
		{name: "a namespace filtered out gets no defaults", tune: defaults(func(c *config.Config) { c.Namespaces.Exclude = []string{"team"} }),
			want: want{skip: `namespace "team" is filtered out`}},
		// Multus is the node's primary network: it attaches its own
		// defaultNetworks there, on these interface names.
		{name: "Multus primary: no defaults", tune: defaults(kube), cat: &multus,
			ann: map[string]string{AnnotationNPWGNetworks: "red"}, want: want{skip: "Multus's on this node"}},
		{name: "Multus primary: own annotation without defaults", tune: defaults(kube), cat: &multus,
			ann: map[string]string{AnnotationNetworks: "beta"}, want: want{ifnames: []string{"beta@net1"}}},
		{name: "an unknown default network fails the pod naming the key", tune: func(c *config.Config) { c.DefaultNetworks = []string{"gamma"} },
			want: want{err: cni.ErrUnknownNetwork, msg: `nri.conf defaultNetworks[0] (gamma): unknown network "gamma"`}},
		{name: "a default NAD that does not exist", tune: func(c *config.Config) { kube(c); c.DefaultNetworks = []string{"kube-system/nope"} },
			cat: &cat, want: want{err: ErrNoSuchNAD, msg: "nri.conf defaultNetworks[0] (kube-system/nope)"}},
		{name: "a default NAD without a NAD source", tune: func(c *config.Config) { kube(c); c.DefaultNetworks = []string{"kube-system/sidecar"} },
			cat: &Catalogue{Local: local}, want: want{msg: "nri.conf defaultNetworks[0] (kube-system/sidecar): NetworkAttachmentDefinition kube-system/sidecar: Kubernetes mode is off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Networks = []string{"alpha"}
			if tc.tune != nil {
				tc.tune(&cfg)
			}
			c := cat
			if tc.cat != nil {
				c = *tc.cat
			}
			ns := tc.ns
			if ns == "" {
				ns = "team"
			}
			p, err := New(cfg, c).Plan(context.Background(), Pod{Namespace: ns, Annotations: tc.ann, Claims: tc.claims})
			if tc.want.err != nil || tc.want.msg != "" {
				require.Error(t, err)
				if tc.want.err != nil {
					require.ErrorIs(t, err, tc.want.err)
				}
				assert.Contains(t, err.Error(), tc.want.msg)
				return
			}
			require.NoError(t, err)
			if tc.want.skip != "" {
				assert.Contains(t, p.Skip, tc.want.skip)
				assert.Empty(t, p.Attachments)
				return
			}
			assert.Empty(t, p.Skip)
			var got []string
			for _, a := range p.Attachments {
				s := a.Network.Name + "@" + a.IfName
				if a.Default {
					s += "*"
				}
				got = append(got, s)
			}
			assert.Equal(t, tc.want.ifnames, got)
		})
	}
}

// TestDefaultNetworksGetNoPodCapabilities: the pod's capability annotations
// are for the networks it chose; the defaults are the admin's, the same for
// every pod. A default NAD is marked as the NAD's.
func TestDefaultNetworksGetNoPodCapabilities(t *testing.T) {
	alpha, side := network(t, "alpha", "mac"), network(t, "side", "mac")
	cfg := config.Default()
	cfg.PodSelection = true
	cfg.PodCapabilities = []string{"mac"}
	cfg.Kubernetes = &config.KubernetesConfig{}
	cfg.DefaultNetworks = []string{"side", "kube-system/sidecar"}
	p := New(cfg, Catalogue{Local: func() []*cni.Network { return []*cni.Network{alpha, side} },
		NADs: nads{{"kube-system", "sidecar"}: network(t, "cni-sidecar", "mac")}})
	pl, err := p.Plan(context.Background(), Pod{Namespace: "team",
		Annotations: map[string]string{AnnotationNetworks: "alpha", AnnotationMAC: "02:00:00:00:00:01"}})
	require.NoError(t, err)
	require.Len(t, pl.Attachments, 3)
	assert.Empty(t, pl.Attachments[0].Caps, "side")
	assert.Empty(t, pl.Attachments[1].Caps, "sidecar")
	assert.Equal(t, "kube-system/sidecar", pl.Attachments[1].NAD)
	assert.Equal(t, map[string]any{"mac": "02:00:00:00:00:01"}, pl.Attachments[2].Caps)
	owner, ok := cni.OwnerOf(pl.Attachments[1].Network.List.Bytes)
	require.True(t, ok)
	assert.Equal(t, cni.Owner{NAD: "kube-system/sidecar"}, owner)
}

// TestDiffKeepsDefaultNetworks: hot-plug never removes a default network,
// nor adds one the pod did not start with (a config reload changes what new
// pods get), and names what it adds around the kept ones.
func TestDiffKeepsDefaultNetworks(t *testing.T) {
	p := New(config.Default(), Catalogue{})
	rec := []state.Network{
		{Name: "side", IfName: "net1", Default: true},
		{Name: "old-default", IfName: "net2", Default: true}, // removed from defaultNetworks since
		{Name: "a", IfName: "net3"},
		{Name: "side", IfName: "net4"}, // the annotation's own copy of the network
	}
	for _, tc := range []struct {
		name   string
		plan   []Attachment
		add    []string // network@ifname
		remove []int
	}{
		{name: "the annotation removed entirely", plan: []Attachment{{Network: &cni.Network{Name: "side"}, IfName: "net1", Default: true},
			{Network: &cni.Network{Name: "new-default"}, IfName: "net2", Default: true}},
			remove: []int{2, 3}},
		{name: "an element added", plan: []Attachment{{Network: &cni.Network{Name: "side"}, IfName: "net1", Default: true},
			{Network: &cni.Network{Name: "a"}, IfName: "net2"}, {Network: &cni.Network{Name: "side"}, IfName: "net3"},
			{Network: &cni.Network{Name: "b"}, IfName: "net4"}},
			add: []string{"b@net5"}},
		{name: "the annotation's copy of a default network is not the default", plan: []Attachment{
			{Network: &cni.Network{Name: "side"}, IfName: "net1", Default: true}, {Network: &cni.Network{Name: "a"}, IfName: "net2"}},
			remove: []int{3}},
		{name: "no defaults planned (namespace now excluded): none removed", plan: []Attachment{{Network: &cni.Network{Name: "a"}, IfName: "net1"},
			{Network: &cni.Network{Name: "side"}, IfName: "net2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, add, remove := p.Diff(rec, tc.plan)
			var got []string
			for _, a := range add {
				got = append(got, a.Network.Name+"@"+a.IfName)
				assert.False(t, a.Default, "hot-plug adds no default network")
			}
			assert.Equal(t, tc.add, got)
			assert.Equal(t, tc.remove, remove)
		})
	}
}

// TestMultusDefaultNetworkAnnotation: nri-cni never replaces eth0. A pod
// asking for another one with Multus's annotation is refused where nri-cni
// would attach networks to it, and left alone where it would not or where
// Multus is the primary network (and honours the annotation itself).
func TestMultusDefaultNetworkAnnotation(t *testing.T) {
	alpha, side := network(t, "alpha"), network(t, "side")
	local := func() []*cni.Network { return []*cni.Network{alpha, side} }
	selection := func(c *config.Config) { c.PodSelection, c.RequireAnnotation = true, true }
	kube := func(c *config.Config) {
		selection(c)
		c.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true}
	}
	red := nads{{"team", "red"}: network(t, "cni-red")}
	multus := func() string { return "/etc/cni/net.d/00-multus.conf" }
	const value = "kube-system/calico-conf"
	for _, tc := range []struct {
		name   string
		tune   func(*config.Config)
		cat    Catalogue
		ann    map[string]string
		claims []state.ClaimDevice
		refuse bool
		skip   bool
	}{
		{name: "with nri.conf's networks", refuse: true},
		{name: "with the NPWG annotation", tune: kube, cat: Catalogue{NADs: red}, ann: map[string]string{AnnotationNPWGNetworks: "red"}, refuse: true},
		{name: "with nri-cni's annotation", tune: selection, ann: map[string]string{AnnotationNetworks: "alpha"}, refuse: true},
		{name: "with default networks only", tune: func(c *config.Config) { selection(c); c.DefaultNetworks = []string{"side"} }, refuse: true},
		{name: "with a claim only", tune: kube, cat: Catalogue{NADs: red}, claims: []state.ClaimDevice{device("c1", "net", "alpha")}, refuse: true},
		{name: "nothing to attach: not nri-cni's pod", tune: selection, skip: true},
		{name: "opted out: not nri-cni's pod", tune: selection, ann: map[string]string{AnnotationNetworks: ""}, skip: true},
		{name: "namespace filtered out", tune: func(c *config.Config) { c.Namespaces.Exclude = []string{"team"} }, skip: true},
		{name: "Multus primary honours it", tune: kube, cat: Catalogue{NADs: red, MultusPrimary: multus},
			ann: map[string]string{AnnotationNetworks: "alpha"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Networks = []string{"alpha"}
			if tc.tune != nil {
				tc.tune(&cfg)
			}
			cat := tc.cat
			cat.Local = local
			ann := map[string]string{AnnotationMultusDefaultNetwork: value}
			for k, v := range tc.ann {
				ann[k] = v
			}
			p, err := New(cfg, cat).Plan(context.Background(), Pod{Namespace: "team", Annotations: ann, Claims: tc.claims})
			if tc.refuse {
				require.ErrorIs(t, err, ErrDefaultNetworkAnnotation)
				for _, want := range []string{AnnotationMultusDefaultNetwork, value, "eth0", "Multus is the node's primary network"} {
					assert.Contains(t, err.Error(), want)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.skip, p.Skip != "", "skip %q", p.Skip)
		})
	}
	// A long value is quoted in part.
	cfg := config.Default()
	_, err := New(cfg, Catalogue{Local: local}).Plan(context.Background(), Pod{Namespace: "team",
		Annotations: map[string]string{AnnotationMultusDefaultNetwork: strings.Repeat("x", 5000)}})
	require.ErrorIs(t, err, ErrDefaultNetworkAnnotation)
	assert.Less(t, len(err.Error()), 1000)
}
