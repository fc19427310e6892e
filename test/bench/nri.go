package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/reconcile"
	"github.com/nri-cni/nri-cni/test/harness"
)

// runtimeSide is the NRI runtime side (containerd's, embedded) on a socket.
type runtimeSide struct {
	r      *adaptation.Adaptation
	synced chan struct{}
	sock   string
}

// startRuntimeSide starts the runtime side; pods are what Synchronize lists.
func startRuntimeSide(dir string, pods func() []*api.PodSandbox) (*runtimeSide, error) {
	rs := &runtimeSide{synced: make(chan struct{}, 4), sock: filepath.Join(dir, "nri.sock")}
	empty := filepath.Join(dir, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return nil, err
	}
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		var list []*api.PodSandbox
		if pods != nil {
			list = pods()
		}
		_, err := cb(ctx, list, nil)
		rs.synced <- struct{}{}
		return err
	}
	upd := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("bench", "v0", syncFn, upd, adaptation.WithSocketPath(rs.sock),
		adaptation.WithPluginPath(empty), adaptation.WithPluginConfigPath(empty))
	if err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	<-rs.synced // Start's own sync (no pre-launched plugins)
	rs.r = r
	return rs, nil
}

// waitPlugin waits until a plugin connected and joined the runtime's list.
func (rs *runtimeSide) waitPlugin() error {
	select {
	case <-rs.synced:
	case <-time.After(15 * time.Second):
		return fmt.Errorf("no plugin connected to %s", rs.sock)
	}
	rs.r.BlockPluginSync().Unblock()
	return nil
}

// benchNRI: 2. RunPodSandbox+Stop+Remove delivered through NRI (runtime side
// embedded, plugin over its socket) vs the same chain's ADD+DEL called directly.
func benchNRI(ctx context.Context, e *env, rep *report, n int) error {
	bridge := harness.RandomName("ncbn")
	c, err := newChain(ctx, e, "nri", bridgeConf("benchnri", bridge, harness.RandomSubnet(240), filepath.Join(e.dir, "ipam-n")), bridge)
	if err != nil {
		return err
	}
	defer c.close()
	rs, err := startRuntimeSide(filepath.Join(e.dir, "nri"), nil)
	if err != nil {
		return err
	}
	defer rs.r.Stop()
	quiet := logrus.New()
	quiet.SetLevel(logrus.ErrorLevel)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = nri.RunExternal(pctx, nri.New(&nri.Engine{Manager: c.mgr, Resync: reconcile.NewResyncer(c.mgr, logrus.NewEntry(quiet))}, nil, logrus.NewEntry(quiet)), rs.sock, "nri-cni", "10", logrus.NewEntry(quiet))
	}()
	defer func() { cancel(); <-done }()
	if err := rs.waitPlugin(); err != nil {
		return err
	}
	viaNRI := func(i int) (time.Duration, error) {
		id := fmt.Sprintf("nri%06d", i)
		pod := &api.PodSandbox{Id: id, Name: "pod-" + id, Namespace: "bench", Uid: "uid-" + id,
			Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: c.netns.Path()}}}}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		start := time.Now()
		if err := rs.r.RunPodSandbox(rctx, &api.RunPodSandboxRequest{Pod: pod}); err != nil {
			return 0, err
		}
		if err := rs.r.StopPodSandbox(rctx, &api.StopPodSandboxRequest{Pod: pod}); err != nil {
			return 0, err
		}
		if err := rs.r.RemovePodSandbox(rctx, &api.RemovePodSandboxRequest{Pod: pod}); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	raw, nri, err := interleave(n, func(i int) (time.Duration, error) { return c.rawPair(ctx, fmt.Sprintf("rawn%06d", i)) }, viaNRI)
	if err != nil {
		return err
	}
	sec := "2 nri"
	rep.add(Row{Section: sec, Metric: "chain ADD+DEL, called directly, p50", Value: pct(raw, 50), Unit: "ms"})
	rep.add(Row{Section: sec, Metric: "Run+Stop+Remove through NRI, p50", Value: pct(nri, 50), Unit: "ms"})
	rep.add(Row{Section: sec, Metric: "Run+Stop+Remove through NRI, p95", Value: pct(nri, 95), Unit: "ms"})
	ratio, delta := paired(raw, nri)
	rep.add(Row{Section: sec, Metric: "ratio of p50s", Value: pct(nri, 50) / pct(raw, 50), Unit: "x"})
	rep.add(Row{Section: sec, Metric: "added latency per pod (paired median)", Value: delta, Unit: "ms"})
	rep.check(sec, "ratio (paired median)", ratio, "x", 1.10, "<= 1.10x")
	return nil
}
