package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/harness"
)

// chain is one CNI network to measure, with nri-cni's Manager over it and a
// raw libcni client over the same config, and a netns to run in.
type chain struct {
	name  string
	mgr   *attach.Manager
	raw   *libcni.CNIConfig
	list  *libcni.NetworkConfigList
	netns ns.NetNS
	close func()
}

// newChain writes conf (a conflist) into its own dir and sets both sides up;
// with adjusts the Manager's Deps (the MultiNetworkPolicy section adds its
// Policy and Firewall).
func newChain(ctx context.Context, e *env, name string, conf []byte, bridge string, with ...func(*attach.Deps)) (*chain, error) {
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "net.d"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "net.d", "10.conflist"), conf, 0o644); err != nil {
		return nil, err
	}
	cfg := config.Default()
	cfg.ConfDir, cfg.BinDirs = filepath.Join(dir, "net.d"), []string{e.tools.CNIDir, e.recorderDir}
	cfg.CacheDir, cfg.StateDir = filepath.Join(dir, "cache"), filepath.Join(dir, "state")
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	resolver, err := netns.NewResolver()
	if err != nil {
		return nil, err
	}
	engine := cni.New(cni.Options{ConfDir: cfg.ConfDir, BinDirs: cfg.BinDirs, CacheDir: cfg.CacheDir})
	if skipped, err := engine.Reload(ctx); err != nil || len(skipped) > 0 {
		return nil, fmt.Errorf("loading %s: %v %v", name, err, skipped)
	}
	quiet := logrus.New()
	quiet.SetLevel(logrus.ErrorLevel)
	deps := attach.Deps{Engine: engine, Netns: resolver, Store: store, Log: logrus.NewEntry(quiet)}
	for _, w := range with {
		w(&deps)
	}
	c := &chain{name: name, mgr: attach.New(cfg, deps),
		raw:  libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, filepath.Join(dir, "raw-cache"), nil),
		list: engine.Networks()[0].List}
	if c.netns, err = testutils.NewNS(); err != nil {
		return nil, err
	}
	c.close = func() {
		_ = c.netns.Close()
		_ = testutils.UnmountNS(c.netns)
		if bridge != "" {
			harness.Secondary{Bridge: bridge}.DeleteBridge()
		}
	}
	return c, nil
}

func podArgs(id string) [][2]string {
	a, _ := cni.PodIdentity{Namespace: "bench", Name: "pod-" + id, UID: "uid-" + id, InfraID: id}.Args()
	return a
}

// rawPair runs ADD+DEL straight through libcni.
func (c *chain) rawPair(ctx context.Context, id string) (time.Duration, error) {
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: c.netns.Path(), IfName: "net1", Args: podArgs(id)}
	start := time.Now()
	if _, err := c.raw.AddNetworkList(ctx, c.list, rt); err != nil {
		return 0, err
	}
	if err := c.raw.DelNetworkList(ctx, c.list, rt); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// rawAdd times the chain's ADD alone through libcni, then DELs it.
func (c *chain) rawAdd(ctx context.Context, id string) (time.Duration, error) {
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: c.netns.Path(), IfName: "net1", Args: podArgs(id)}
	start := time.Now()
	if _, err := c.raw.AddNetworkList(ctx, c.list, rt); err != nil {
		return 0, err
	}
	took := time.Since(start)
	return took, c.raw.DelNetworkList(ctx, c.list, rt)
}

// ourPair runs nri-cni's Attach + Detach (netns checks, records, locks).
func (c *chain) ourPair(ctx context.Context, id string) (time.Duration, error) {
	sb := attach.Sandbox{ID: id, Kind: "pod", Pinned: c.netns.Path(),
		Pod: cni.PodIdentity{Namespace: "bench", Name: "pod-" + id, UID: "uid-" + id, InfraID: id}}
	start := time.Now()
	if _, err := c.mgr.Attach(ctx, sb); err != nil {
		return 0, err
	}
	if err := c.mgr.Detach(ctx, sb, true); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// interleave runs a and b n times each, alternating which goes first.
func interleave(n int, a, b func(i int) (time.Duration, error)) (da, db []time.Duration, err error) {
	for i := 0; i < n; i++ {
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		d1, err := first(i)
		if err != nil {
			return nil, nil, err
		}
		d2, err := second(i)
		if err != nil {
			return nil, nil, err
		}
		if i%2 == 1 {
			d1, d2 = d2, d1
		}
		da, db = append(da, d1), append(db, d2)
	}
	return da, db, nil
}

func bridgeConf(name, bridge, subnet, ipamDir string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"isGateway":false,"ipMasq":false,
"ipam":{"type":"host-local","subnet":%q,"dataDir":%q}}]}`, name, bridge, subnet, ipamDir))
}

// benchEngine: 1. nri-cni's ADD+DEL path vs raw libcni, same process.
func benchEngine(ctx context.Context, e *env, rep *report, n int) error {
	noop := []byte(`{"cniVersion":"1.0.0","name":"noop","plugins":[{"type":"cni-recorder","ip":"10.99.0.5/24"}]}`)
	bridge := harness.RandomName("ncbb")
	cases := []struct {
		label, name string
		conf        []byte
		bridge      string
		limit       float64
	}{
		{"(a) no-op plugin", "noop", noop, "", 0},
		{"(b) bridge+host-local", "bridge", bridgeConf("benchbr", bridge, harness.RandomSubnet(240), filepath.Join(e.dir, "ipam-b")), bridge, 1.05},
	}
	for _, cs := range cases {
		c, err := newChain(ctx, e, cs.name, cs.conf, cs.bridge)
		if err != nil {
			return err
		}
		raw, ours, err := interleave(n,
			func(i int) (time.Duration, error) { return c.rawPair(ctx, fmt.Sprintf("raw%s%05d", cs.name, i)) },
			func(i int) (time.Duration, error) { return c.ourPair(ctx, fmt.Sprintf("our%s%05d", cs.name, i)) })
		c.close()
		if err != nil {
			return err
		}
		sec := "1 engine"
		rep.add(Row{Section: sec, Metric: cs.label + " raw libcni ADD+DEL p50", Value: pct(raw, 50), Unit: "ms"})
		rep.add(Row{Section: sec, Metric: cs.label + " raw libcni ADD+DEL p95", Value: pct(raw, 95), Unit: "ms"})
		rep.add(Row{Section: sec, Metric: cs.label + " nri-cni ADD+DEL p50", Value: pct(ours, 50), Unit: "ms"})
		rep.add(Row{Section: sec, Metric: cs.label + " nri-cni ADD+DEL p95", Value: pct(ours, 95), Unit: "ms"})
		ratio, delta := paired(raw, ours)
		rep.add(Row{Section: sec, Metric: cs.label + " ratio of p50s", Value: pct(ours, 50) / pct(raw, 50), Unit: "x"})
		rep.add(Row{Section: sec, Metric: cs.label + " added per pod (paired median)", Value: delta, Unit: "ms"})
		if cs.limit > 0 {
			rep.check(sec, cs.label+" ratio (paired median)", ratio, "x", cs.limit, "<= 1.05x")
		} else {
			rep.add(Row{Section: sec, Metric: cs.label + " ratio (paired median)", Value: ratio, Unit: "x", Note: "pure overhead"})
		}
	}
	return nil
}
