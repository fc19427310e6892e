package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nri-cni/nri-cni/test/harness"
)

// benchContainerd: 3. n pods created, stopped and removed through CRI with
// nri-cni attaching one bridge network vs containerd alone, same containerd,
// alternating batches. The target is the floor (containerd alone plus the
// network's own ADD+DEL per pod, measured in the same run) + 0.10.
func benchContainerd(ctx context.Context, e *env, rep *report, n int) error {
	dir := filepath.Join(e.dir, "ctd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pauseTar := filepath.Join(e.dir, "pause.tar")
	if err := harness.BuildPauseImageTar(ctx, e.dir, pauseTar); err != nil {
		return err
	}
	ctd, err := harness.StartContainerd(ctx, harness.ContainerdOpts{Dir: dir, Tools: e.tools})
	if err != nil {
		return err
	}
	defer ctd.Close(context.Background())
	if err := harness.ImportImage(ctx, filepath.Join(e.tools.ContainerdDir, "ctr"), ctd.Address, pauseTar); err != nil {
		return err
	}
	pdir := filepath.Join(e.dir, "ctd-plugin")
	sec := harness.NewSecondary(pdir)
	defer sec.DeleteBridge()
	cfg, err := harness.NewPluginConfig(pdir, e.tools, sec)
	if err != nil {
		return err
	}
	cfg.LogLevel = "warn"
	cfgPath := filepath.Join(pdir, "nri.conf")
	if err := cfg.Write(cfgPath); err != nil {
		return err
	}
	cri, err := harness.DialCRI(ctx, ctd.Address)
	if err != nil {
		return err
	}
	defer cri.Close()

	type phase struct{ run, stop, remove []time.Duration }
	var with, without phase
	var wallWith, wallWithout time.Duration
	const batch, inFlight = 10, 2
	for b := 0; b*batch < 2*n; b++ {
		withPlugin := b%2 == 1
		var plugin *harness.Plugin
		if withPlugin {
			if plugin, err = harness.StartPlugin(ctx, ctd, e.bin, cfgPath, cfg); err != nil {
				return err
			}
		}
		var mu sync.Mutex
		ph := &without
		if withPlugin {
			ph = &with
		}
		errs := make(chan error, batch)
		work := make(chan int)
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < inFlight; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					r, s, rm, err := podCycle(ctx, cri, fmt.Sprintf("b%02d-%02d", b, i))
					if err != nil {
						errs <- err
						continue
					}
					mu.Lock()
					ph.run, ph.stop, ph.remove = append(ph.run, r), append(ph.stop, s), append(ph.remove, rm)
					mu.Unlock()
				}
			}()
		}
		for i := 0; i < batch; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
		if withPlugin {
			wallWith += time.Since(start)
			if err := plugin.Stop(); err != nil {
				return err
			}
		} else {
			wallWithout += time.Since(start)
		}
		close(errs)
		for err := range errs {
			return err
		}
	}
	if len(sec.IPFiles()) != 0 {
		return fmt.Errorf("secondary IPs leaked: %v", sec.IPFiles())
	}
	s := "3 containerd"
	for _, p := range []struct {
		name string
		a, b []time.Duration
	}{{"RunPodSandbox", without.run, with.run}, {"StopPodSandbox", without.stop, with.stop}, {"RemovePodSandbox", without.remove, with.remove}} {
		rep.add(Row{Section: s, Metric: p.name + " p50 / p95 alone", Value: pct(p.a, 50), Unit: "ms", Note: fmt.Sprintf("p95 %.1f ms", pct(p.a, 95))})
		rep.add(Row{Section: s, Metric: p.name + " p50 / p95 with nri-cni", Value: pct(p.b, 50), Unit: "ms", Note: fmt.Sprintf("p95 %.1f ms", pct(p.b, 95))})
	}
	rep.add(Row{Section: s, Metric: fmt.Sprintf("wall time, %d pods alone", len(without.run)), Value: wallWithout.Seconds(), Unit: "s"})
	rep.add(Row{Section: s, Metric: fmt.Sprintf("wall time, %d pods with nri-cni", len(with.run)), Value: wallWith.Seconds(), Unit: "s"})
	// The floor: the same bridge network's ADD + DEL for each pod through
	// libcni alone (no NRI, no records), spread over the pods in flight,
	// on top of containerd alone: what the network costs whoever runs it.
	floor, err := stormFloor(ctx, e, len(with.run), inFlight, wallWithout)
	if err != nil {
		return err
	}
	rep.add(Row{Section: s, Metric: "floor: containerd alone + the network's ADD+DEL per pod (libcni alone)", Value: floor, Unit: "x",
		Note: "measured in the same run"})
	rep.check(s, "wall-time ratio", wallWith.Seconds()/wallWithout.Seconds(), "x", floor+stormMargin,
		fmt.Sprintf("<= floor %.2fx + %.2f", floor, stormMargin))
	return nil
}

// stormMargin is what nri-cni may add to the storm's floor (its NRI round
// trips, records and locks), as a ratio to containerd alone.
const stormMargin = 0.10

// stormFloor times pods ADD+DEL pairs of a bridge network like the storm's
// through libcni in a netns of its own and returns (wallAlone + their sum / inFlight) / wallAlone.
func stormFloor(ctx context.Context, e *env, pods, inFlight int, wallAlone time.Duration) (float64, error) {
	bridge := harness.RandomName("ncbf")
	c, err := newChain(ctx, e, "ctd-floor", bridgeConf("ctdfloor", bridge, harness.RandomSubnet(241), filepath.Join(e.dir, "ipam-ctd-floor")), bridge)
	if err != nil {
		return 0, err
	}
	defer c.close()
	var sum time.Duration
	for i := 0; i < pods; i++ {
		d, err := c.rawPair(ctx, fmt.Sprintf("ctdfloor%05d", i))
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return (wallAlone + sum/time.Duration(inFlight)).Seconds() / wallAlone.Seconds(), nil
}

func podCycle(ctx context.Context, cri *harness.CRI, name string) (run, stop, remove time.Duration, err error) {
	return podCycleSpec(ctx, cri, harness.PodSpec{Name: name, Namespace: "bench", UID: harness.RandomName("uid-")})
}

// podCycleSpec runs, stops and removes one pod and times each call.
func podCycleSpec(ctx context.Context, cri *harness.CRI, spec harness.PodSpec) (run, stop, remove time.Duration, err error) {
	t0 := time.Now()
	id, err := cri.RunPod(ctx, spec)
	if err != nil {
		return 0, 0, 0, err
	}
	t1 := time.Now()
	if err := cri.StopPod(ctx, id); err != nil {
		return 0, 0, 0, err
	}
	t2 := time.Now()
	if err := cri.RemovePod(ctx, id); err != nil {
		return 0, 0, 0, err
	}
	return t1.Sub(t0), t2.Sub(t1), time.Since(t2), nil
}
