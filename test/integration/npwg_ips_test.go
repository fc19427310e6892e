package integration

// The NPWG "ips" key without a prefix length (NPWG v1.3's own example),
// passed to the real reference IPAMs as written: host-local takes the
// prefix from its range; static needs one and says so, and the pod fails
// cleanly naming the network.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/testenv"
)

func TestNPWGBareIPWithHostLocalAndStatic(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	binDir := filepath.Join(root, "bin")
	require.NoError(t, os.MkdirAll(binDir, 0o755))
	// static is not among the pinned plugins the tiers install: built from
	// the same plugins module (go.mod's version).
	_, err := testenv.GoBuild(binDir, "github.com/containernetworking/plugins/plugins/ipam/static", "static")
	require.NoError(t, err)
	subnet := fmt.Sprintf("10.%d.%d", 200+rand.IntN(50), rand.IntN(256))
	bridge := testenv.UniqueName("ncip")
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	nad := func(name string, ipam map[string]any) *cni.Network {
		data, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{
			map[string]any{"type": "bridge", "bridge": bridge, "isGateway": false, "ipMasq": false,
				"capabilities": map[string]bool{"ips": true}, "ipam": ipam}}})
		require.NoError(t, err)
		n, err := cni.Parse(data)
		require.NoError(t, err)
		return n
	}
	src := &attachtest.Source{NADs: map[plan.NADRef]*cni.Network{
		{Namespace: "ns1", Name: "hl"}: nad("hl-"+bridge, map[string]any{"type": "host-local", "subnet": subnet + ".0/24",
			"dataDir": filepath.Join(root, "ipam")}),
		{Namespace: "ns1", Name: "st"}: nad("st-"+bridge, map[string]any{"type": "static"}),
	}}
	cfg := config.Default()
	cfg.ConfDir, cfg.BinDirs = filepath.Join(root, "net.d"), []string{testenv.CNIPluginsDir(t), binDir}
	cfg.CacheDir, cfg.StateDir = filepath.Join(root, "cache"), filepath.Join(root, "state")
	cfg.PodSelection, cfg.RequireAnnotation = true, true
	cfg.PodCapabilities = []string{"ips"}
	cfg.Kubernetes = &config.KubernetesConfig{NPWGAnnotation: true}
	require.NoError(t, os.MkdirAll(cfg.ConfDir, 0o755))
	require.NoError(t, cfg.Validate())
	sink := &attachtest.Sink{}
	built, err := attach.Build(context.Background(), cfg, false, attach.Deps{NADs: src, Sink: sink})
	require.NoError(t, err)
	mgr, store := built.Manager, built.Store

	pod := func(id, annotation string) attach.Sandbox {
		n := testenv.NewNetNS(t)
		pid := testenv.SleepIn(t, n.Path())
		return attach.Sandbox{ID: id, Kind: "pod", Pid: uint32(pid), Pinned: n.Path(),
			Pod:         cni.PodIdentity{Namespace: "ns1", Name: "pod-" + id, UID: "uid-" + id, InfraID: id},
			Annotations: map[string]string{plan.AnnotationNPWGNetworks: annotation}}
	}
	ctx := func() context.Context { return attachtest.WithDeadline(t, 10*time.Second) }

	// host-local: the bare address, with the range's prefix.
	a := pod(testenv.UniqueName("a"), fmt.Sprintf(`[{"name":"hl","ips":["%s.9"]}]`, subnet))
	rec, err := mgr.Attach(ctx(), a)
	require.NoError(t, err)
	assert.Equal(t, []string{subnet + ".9/24"}, rec.Networks[0].IPs)
	status, _ := sink.Snapshot()
	require.Len(t, status, 1)
	assert.Equal(t, []string{subnet + ".9"}, status[0].Networks[1].IPs, "network-status")
	require.NoError(t, mgr.Detach(ctx(), a, true))

	// static: refuses a bare address; the pod fails naming the network.
	b := pod(testenv.UniqueName("b"), fmt.Sprintf(`[{"name":"st","ips":["%s.10"]}]`, subnet))
	_, err = mgr.Attach(ctx(), b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `network "st-`+bridge+`"`)
	assert.Contains(t, err.Error(), "NOT in CIDR notation")
	_, err = store.Get(b.ID)
	assert.ErrorIs(t, err, state.ErrNotFound, "rolled back, nothing recorded")

	// static with the prefix.
	c := pod(testenv.UniqueName("c"), fmt.Sprintf(`[{"name":"st","ips":["%s.11/24"]}]`, subnet))
	rec, err = mgr.Attach(ctx(), c)
	require.NoError(t, err)
	assert.Equal(t, []string{subnet + ".11/24"}, rec.Networks[0].IPs)
	require.NoError(t, mgr.Detach(ctx(), c, true))
}
