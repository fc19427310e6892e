package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/harness"
)

// multiNet is one configuration of the multi-network section: k bridge
// networks per pod, serial or parallel, behind its own NRI runtime side.
type multiNet struct {
	k        int
	parallel bool
	rs       *runtimeSide
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
	return fmt.Sprintf("%d network(s), %s", c.k, mode)
}

// newMultiNet writes k bridge+host-local networks (own bridge, subnet and
// IPAM dir each) and connects a Manager attaching all of them, through a
// runtime side of its own.
func newMultiNet(ctx context.Context, e *env, k int, parallel bool) (c *multiNet, err error) {
	c = &multiNet{k: k, parallel: parallel}
	dir := filepath.Join(e.dir, fmt.Sprintf("multi-%d-%t", k, parallel))
	cfg := config.Default()
	cfg.ConfDir, cfg.BinDirs = filepath.Join(dir, "net.d"), []string{e.tools.CNIDir}
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
		name, br := fmt.Sprintf("multi%d", i), harness.RandomName("ncbm")
		c.bridges = append(c.bridges, br)
		conf := bridgeConf(name, br, harness.RandomSubnet(230), filepath.Join(dir, "ipam"))
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
	if c.netns, err = testutils.NewNS(); err != nil {
		return nil, err
	}
	if c.rs, err = startRuntimeSide(filepath.Join(dir, "nri"), nil); err != nil {
		return nil, err
	}
	quiet := logrus.New()
	quiet.SetLevel(logrus.ErrorLevel)
	mgr := hook.NewManager(cfg, engine, resolver, store, logrus.NewEntry(quiet))
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hook.RunExternal(pctx, hook.NewPlugin(mgr, nil, logrus.NewEntry(quiet)), c.rs.sock, "nri-cni", "10", logrus.NewEntry(quiet))
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
	id := fmt.Sprintf("mn%d%t%05d", c.k, c.parallel, i)
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

// benchMultiNet: 8. pods with 1, 3 and 6 bridge networks each, attached one
// after the other (the default) and in parallel (parallelAttach), through
// NRI. The six configurations take turns pod by pod, so drift of the
// machine hits all alike. Goal: 3 networks in parallel within 1.3x the time
// of one network.
func benchMultiNet(ctx context.Context, e *env, rep *report, n int) error {
	var all []*multiNet
	defer func() {
		for _, c := range all {
			c.close()
		}
	}()
	for _, k := range []int{1, 3, 6} {
		for _, parallel := range []bool{false, true} {
			c, err := newMultiNet(ctx, e, k, parallel)
			if err != nil {
				return err
			}
			all = append(all, c)
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
	const s = "8 multi-network"
	one := all[0] // 1 network, serial
	for _, c := range all {
		rep.add(Row{Section: s, Metric: "RunPodSandbox p50, " + c.label(), Value: pct(c.run, 50), Unit: "ms",
			Note: fmt.Sprintf("p95 %.1f ms; Stop+Remove p50 %.1f ms; %.2fx one network", pct(c.run, 95), pct(c.teardown, 50),
				pct(c.run, 50)/pct(one.run, 50))})
	}
	for _, c := range all {
		if c.k == 3 && c.parallel {
			rep.check(s, "3 networks in parallel vs 1 network (RunPodSandbox p50s)", pct(c.run, 50)/pct(one.run, 50), "x", 1.3, "<= 1.30x")
		}
	}
	return nil
}
