package plan

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

// TestPlanWithoutConfigs: confDir empty (or missing: the same empty
// catalogue). A pod that asks for no network by name (nri.conf networks: [],
// the first config of confDir) gets nothing and is not failed; a network
// named by the admin (networks, defaultNetworks) or by the pod (its
// annotation) still fails it, naming the network and the dir.
func TestPlanWithoutConfigs(t *testing.T) {
	const dir = "/etc/nri-cni/net.d"
	alpha := network(t, "alpha")
	selection := func(c *config.Config) { c.PodSelection = true }
	for _, tc := range []struct {
		name  string
		tune  func(*config.Config)
		local []*cni.Network
		ann   map[string]string
		skip  bool
		err   error
		msg   []string
		want  []string // network@ifname
	}{
		{name: "networks: [], nothing asked", skip: true},
		{name: "networks: [], an annotation without podSelection", ann: map[string]string{AnnotationNetworks: "alpha"}, skip: true},
		{name: "podSelection, no annotation", tune: selection, skip: true},
		{name: "podSelection, opted out", tune: selection, ann: map[string]string{AnnotationNetworks: ""}, skip: true},
		{name: "podSelection, a network asked for", tune: selection, ann: map[string]string{AnnotationNetworks: "storage"},
			err: ErrBadAnnotation, msg: []string{`unknown network "storage"`, dir}},
		{name: "nri.conf networks names one", tune: func(c *config.Config) { c.Networks = []string{"storage"} },
			err: cni.ErrUnknownNetwork, msg: []string{`"storage"`, dir}},
		{name: "defaultNetworks names one", tune: func(c *config.Config) { c.DefaultNetworks = []string{"storage"} },
			err: cni.ErrUnknownNetwork, msg: []string{"defaultNetworks[0]", `"storage"`, dir}},
		// With a config there, networks: [] attaches it as before.
		{name: "networks: [] with a config", local: []*cni.Network{alpha}, want: []string{"alpha@net1"}},
		// defaultNetworks are attached whatever networks: [] finds.
		{name: "defaultNetworks and networks: [] with only them", tune: func(c *config.Config) {
			c.DefaultNetworks = []string{"alpha"}
		}, local: []*cni.Network{alpha}, want: []string{"alpha@net1", "alpha@net2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.ConfDir = dir
			if tc.tune != nil {
				tc.tune(&cfg)
			}
			local := tc.local
			p, err := New(cfg, Catalogue{Local: func() []*cni.Network { return local }}).
				Plan(context.Background(), Pod{Namespace: "team", Annotations: tc.ann})
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				for _, m := range tc.msg {
					assert.Contains(t, err.Error(), m)
				}
				return
			}
			require.NoError(t, err)
			if tc.skip {
				assert.Empty(t, p.Attachments)
				assert.NotEmpty(t, p.Skip)
				return
			}
			var got []string
			for _, a := range p.Attachments {
				got = append(got, a.Network.Name+"@"+a.IfName)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
