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

// benchCRIO: 3b. the same pod cycles as section 3 through a real CRI-O 1.36
// with the infra container dropped (the kubelet's setup: NRI Pid 0, the pod's
// pid namespace per container), nri-cni attaching one bridge network vs CRI-O
// alone, same CRI-O, alternating batches.
func benchCRIO(ctx context.Context, e *env, rep *report, n int) error {
	pauseTar := filepath.Join(e.dir, "pause.tar")
	if _, err := os.Stat(pauseTar); err != nil {
		if err := harness.BuildPauseImageTar(ctx, e.dir, pauseTar); err != nil {
			return err
		}
	}
	// A short dir of its own: CRI-O's sockets live in it.
	dir, err := os.MkdirTemp("", "bcrio")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := harness.StartCRIO(ctx, harness.CRIOOpts{Dir: filepath.Join(dir, "c"), Tools: e.tools,
		CRIOBinDir: e.tools.CRIODir, DropInfra: true, PauseTar: pauseTar}) // info: StartPlugin waits for its sync line
	if err != nil {
		return err
	}
	defer func() {
		_ = c.Close(context.Background())
		if left := c.Leftovers(); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "bench: left behind by CRI-O:", left)
		}
	}()
	pdir := filepath.Join(dir, "p")
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
	cri, err := harness.DialCRI(ctx, c.Address)
	if err != nil {
		return err
	}
	defer cri.Close()

	var with, without phases
	const batch, inFlight = 10, 2
	for b := 0; b*batch < 2*n; b++ {
		withPlugin := b%2 == 1
		ph := &without
		var plugin *harness.Plugin
		if withPlugin {
			ph = &with
			if plugin, err = harness.StartPlugin(ctx, c, e.bin, cfgPath, cfg); err != nil {
				return err
			}
		}
		start := time.Now()
		err := cycleBatch(ctx, cri, fmt.Sprintf("c%02d", b), batch, inFlight, ph)
		ph.wall += time.Since(start)
		if plugin != nil {
			if perr := plugin.Stop(); perr != nil && err == nil {
				err = perr
			}
		}
		if err != nil {
			return err
		}
	}
	if len(sec.IPFiles()) != 0 {
		return fmt.Errorf("secondary IPs leaked: %v", sec.IPFiles())
	}
	s := "3b crio"
	for _, p := range []struct {
		name string
		a, b []time.Duration
	}{{"RunPodSandbox", without.run, with.run}, {"StopPodSandbox", without.stop, with.stop}, {"RemovePodSandbox", without.remove, with.remove}} {
		rep.add(Row{Section: s, Metric: p.name + " p50 / p95 alone", Value: pct(p.a, 50), Unit: "ms", Note: fmt.Sprintf("p95 %.1f ms", pct(p.a, 95))})
		rep.add(Row{Section: s, Metric: p.name + " p50 / p95 with nri-cni", Value: pct(p.b, 50), Unit: "ms", Note: fmt.Sprintf("p95 %.1f ms", pct(p.b, 95))})
		rep.add(Row{Section: s, Metric: p.name + " ratio of p50s", Value: pct(p.b, 50) / pct(p.a, 50), Unit: "x"})
	}
	rep.add(Row{Section: s, Metric: fmt.Sprintf("wall time, %d pods alone", len(without.run)), Value: without.wall.Seconds(), Unit: "s"})
	rep.add(Row{Section: s, Metric: fmt.Sprintf("wall time, %d pods with nri-cni", len(with.run)), Value: with.wall.Seconds(), Unit: "s"})
	floor, err := stormFloor(ctx, e, len(with.run), inFlight, without.wall)
	if err != nil {
		return err
	}
	rep.add(Row{Section: s, Metric: "floor: CRI-O alone + the network's ADD+DEL per pod (libcni alone)", Value: floor, Unit: "x",
		Note: "measured in the same run"})
	rep.check(s, "wall-time ratio", with.wall.Seconds()/without.wall.Seconds(), "x", floor+stormMargin,
		fmt.Sprintf("<= floor %.2fx + %.2f", floor, stormMargin))
	return nil
}

// phases collects per-pod durations of one side of a comparison.
type phases struct {
	run, stop, remove []time.Duration
	wall              time.Duration
}

// cycleBatch runs size pod cycles (kubelet pid mode: one pid namespace per
// container), inFlight at a time, adding their durations to ph.
func cycleBatch(ctx context.Context, cri *harness.CRI, prefix string, size, inFlight int, ph *phases) error {
	var mu sync.Mutex
	errs := make(chan error, size)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < inFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r, s, rm, err := podCycleSpec(ctx, cri, harness.PodSpec{Name: fmt.Sprintf("%s-%02d", prefix, i),
					Namespace: "bench", UID: harness.RandomName("uid-"), PidPerContainer: true})
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
	for i := 0; i < size; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs // nil when closed and empty
}
