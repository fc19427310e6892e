package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/reconcile"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/harness"
)

// multiNet is one configuration of the multi-network section: k bridge
// networks per pod, serial or parallel, behind its own NRI runtime side.
type multiNet struct {
	kind     string // "bridge" or "waiting"
	k        int
	parallel bool
	rs       *runtimeSide
	engine   *cni.Engine
	netns    ns.NetNS
	bridges  []string
	stop     func()
	run      []time.Duration // RunPodSandbox
	teardown []time.Duration // StopPodSandbox + RemovePodSandbox
}

func (c *multiNet) label() string {
	mode := "serial"
	if c.parallel {
		mode = "parallel"
	}
	return fmt.Sprintf("%s, %d network(s), %s", c.kind, c.k, mode)
}

// newMultiNet writes k bridge+host-local networks (own bridge, subnet and
// IPAM dir each) and connects a Manager attaching all of them, through a
// runtime side of its own.
// kind "waiting" is the recording plugin answering each ADD after 20 ms: a
// chain that waits (a remote IPAM, a device daemon) rather than computes.
func newMultiNet(ctx context.Context, e *env, kind string, k int, parallel bool) (c *multiNet, err error) {
	c = &multiNet{kind: kind, k: k, parallel: parallel}
	dir := filepath.Join(e.dir, fmt.Sprintf("multi-%s-%d-%t", kind, k, parallel))
	cfg := config.Default()
	cfg.ConfDir, cfg.BinDirs = filepath.Join(dir, "net.d"), []string{e.tools.CNIDir, e.recorderDir}
	cfg.CacheDir, cfg.StateDir = filepath.Join(dir, "cache"), filepath.Join(dir, "state")
	cfg.ParallelAttach = parallel
	cfg.CNITimeout = config.Duration(5 * time.Second)
	if err := os.MkdirAll(cfg.ConfDir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	for i := 0; i < k; i++ {
		name := fmt.Sprintf("multi%d", i)
		conf := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"cni-recorder","ip":"10.99.%d.5/24","sleep":"20ms"}]}`, name, i))
		if kind == "bridge" {
			br := harness.RandomName("ncbm")
			c.bridges = append(c.bridges, br)
			conf = bridgeConf(name, br, harness.RandomSubnet(230), filepath.Join(dir, "ipam"))
		}
		if err := os.WriteFile(filepath.Join(cfg.ConfDir, fmt.Sprintf("%02d.conflist", i)), conf, 0o644); err != nil {
			return nil, err
		}
		cfg.Networks = append(cfg.Networks, name)
	}
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
		return nil, fmt.Errorf("loading %s: %v %v", dir, err, skipped)
	}
	c.engine = engine
	if c.netns, err = testutils.NewNS(); err != nil {
		return nil, err
	}
	if c.rs, err = startRuntimeSide(filepath.Join(dir, "nri"), nil); err != nil {
		return nil, err
	}
	quiet := logrus.New()
	quiet.SetLevel(logrus.ErrorLevel)
	mgr := attach.New(cfg, attach.Deps{Engine: engine, Netns: resolver, Store: store, Log: logrus.NewEntry(quiet)})
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = nri.RunExternal(pctx, nri.New(&nri.Engine{Manager: mgr, Resync: reconcile.NewResyncer(mgr, logrus.NewEntry(quiet))}, nil, logrus.NewEntry(quiet)), c.rs.sock, "nri-cni", "10", logrus.NewEntry(quiet))
	}()
	c.stop = func() { cancel(); <-done }
	return c, c.rs.waitPlugin()
}

func (c *multiNet) close() {
	if c.stop != nil {
		c.stop()
	}
	if c.rs != nil {
		c.rs.r.Stop()
	}
	if c.netns != nil {
		_ = c.netns.Close()
		_ = testutils.UnmountNS(c.netns)
	}
	for _, br := range c.bridges {
		harness.Secondary{Bridge: br}.DeleteBridge()
	}
}

// pod runs one pod through Run, then Stop and Remove.
func (c *multiNet) pod(ctx context.Context, i int) error {
	id := fmt.Sprintf("mn%s%d%t%05d", c.kind, c.k, c.parallel, i)
	pod := &api.PodSandbox{Id: id, Name: "pod-" + id, Namespace: "bench", Uid: "uid-" + id,
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: c.netns.Path()}}}}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.rs.r.RunPodSandbox(rctx, &api.RunPodSandboxRequest{Pod: pod}); err != nil {
		return fmt.Errorf("%s: RunPodSandbox: %w", c.label(), err)
	}
	ran := time.Now()
	if err := c.rs.r.StopPodSandbox(rctx, &api.StopPodSandboxRequest{Pod: pod}); err != nil {
		return err
	}
	if err := c.rs.r.RemovePodSandbox(rctx, &api.RemovePodSandboxRequest{Pod: pod}); err != nil {
		return err
	}
	c.run, c.teardown = append(c.run, ran.Sub(start)), append(c.teardown, time.Since(ran))
	return nil
}

// rawAdd ADDs the configuration's networks straight through libcni, all at
// once (no nri-cni: no records, locks or NRI), and returns how long the ADDs
// took; then DELs them. The machine's floor for parallel ADDs.
func (c *multiNet) rawAdd(ctx context.Context, i int) (time.Duration, error) {
	id := fmt.Sprintf("raw%d%05d", c.k, i)
	nets := c.engine.Networks()
	rts := make([]*libcni.RuntimeConf, len(nets))
	errs := make([]error, len(nets))
	var wg sync.WaitGroup
	start := time.Now()
	for j, n := range nets {
		rts[j] = &libcni.RuntimeConf{ContainerID: id, NetNS: c.netns.Path(), IfName: fmt.Sprintf("raw%d", j), Args: podArgs(id)}
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[j] = c.engine.CNI().AddNetworkList(ctx, n.List, rts[j]) }()
	}
	wg.Wait()
	took := time.Since(start)
	for j, n := range nets {
		if err := c.engine.CNI().DelNetworkList(ctx, n.List, rts[j]); err != nil && errs[j] == nil {
			errs[j] = err
		}
	}
	return took, errors.Join(errs...)
}

// parallelMargin is what nri-cni may add to the plugins' own floor for
// three networks attached at once, as a ratio to one network.
const parallelMargin = 0.30

// benchMultiNet: 8. pods with 1, 3 and 6 bridge networks each, attached one
// after the other (the default) and in parallel (parallelAttach), through
// NRI. The six configurations take turns pod by pod, so drift of the
// machine hits all alike. Goal: 3 networks in parallel within the floor
// (the same three ADDs through libcni alone, at once, over one; 1 for the
// waiting plugin) + 0.30 of the time of one network.
func benchMultiNet(ctx context.Context, e *env, rep *report, n int) error {
	var all []*multiNet
	defer func() {
		for _, c := range all {
			c.close()
		}
	}()
	for _, kind := range []string{"bridge", "waiting"} {
		for _, k := range []int{1, 3, 6} {
			for _, parallel := range []bool{false, true} {
				c, err := newMultiNet(ctx, e, kind, k, parallel)
				if err != nil {
					return err
				}
				all = append(all, c)
			}
		}
	}
	for i := 0; i < n; i++ {
		for j := range all {
			c := all[(i+j)%len(all)]
			if err := c.pod(ctx, i); err != nil {
				return err
			}
		}
	}
	// The floor: the same ADDs through libcni alone, 1 network vs 3 at once.
	var raw1, raw3 []time.Duration
	for i := 0; i < n; i++ {
		for _, c := range []*multiNet{all[1], all[3]} { // bridge: 1 and 3 networks (parallel configs)
			d, err := c.rawAdd(ctx, i)
			if err != nil {
				return err
			}
			if c.k == 1 {
				raw1 = append(raw1, d)
			} else {
				raw3 = append(raw3, d)
			}
		}
	}
	const s = "8 multi-network"
	floor := pct(raw3, 50) / pct(raw1, 50)
	rep.add(Row{Section: s, Metric: "raw libcni ADD p50, 1 network", Value: pct(raw1, 50), Unit: "ms", Note: "no nri-cni"})
	rep.add(Row{Section: s, Metric: "raw libcni ADD p50, 3 networks at once", Value: pct(raw3, 50), Unit: "ms",
		Note: fmt.Sprintf("%.2fx one network: this machine's floor for parallel ADDs", floor)})
	for _, kind := range []string{"bridge", "waiting"} {
		var one, three *multiNet
		for _, c := range all {
			switch {
			case c.kind != kind:
				continue
			case c.k == 1 && !c.parallel:
				one = c
			case c.k == 3 && c.parallel:
				three = c
			}
		}
		for _, c := range all {
			if c.kind != kind {
				continue
			}
			rep.add(Row{Section: s, Metric: "RunPodSandbox p50, " + c.label(), Value: pct(c.run, 50), Unit: "ms",
				Note: fmt.Sprintf("p95 %.1f ms; Stop+Remove p50 %.1f ms; %.2fx one network", pct(c.run, 95), pct(c.teardown, 50),
					pct(c.run, 50)/pct(one.run, 50))})
		}
		// The target is the floor plus nri-cni's margin: three bridge
		// ADDs at once cost the plugins themselves floor times one (the
		// bridge's and host-local's locks, the CPUs); the waiting
		// plugin's sleeps overlap fully (floor 1).
		f := 1.0
		if kind == "bridge" {
			f = floor
		}
		rep.check(s, kind+": 3 networks in parallel vs 1 network (RunPodSandbox p50s)", pct(three.run, 50)/pct(one.run, 50), "x",
			f+parallelMargin, fmt.Sprintf("<= floor %.2fx + %.2f", f, parallelMargin))
	}
	return nil
}
