// Command soak drives nri-cni hard against a real containerd (root): many
// pod create/stop/remove cycles, a few at a time, while nri-cni is SIGKILLed
// and restarted at random moments and containerd itself is restarted; then
// it checks that nothing leaked (IP files, veths, libcni cache entries,
// records) and that the last plugin process kept its goroutines and RSS flat.
//
//	make soak                      # 500 cycles, 20 kills, 2 containerd restarts
//	go run ./test/soak -cycles 100 -kills 4 -restarts 1
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nri-cni/nri-cni/test/harness"
)

type opts struct {
	cycles, kills, restarts, workers int
}

func main() {
	var o opts
	flag.IntVar(&o.cycles, "cycles", 500, "pod create/stop/remove cycles")
	flag.IntVar(&o.kills, "kills", 20, "nri-cni SIGKILL+restart events")
	flag.IntVar(&o.restarts, "restarts", 2, "containerd restarts")
	flag.IntVar(&o.workers, "workers", 4, "pods in flight at once")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "\nsoak FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\nsoak OK")
}

type world struct {
	ctd    *harness.Containerd
	sec    harness.Secondary
	cfg    harness.PluginConfig
	bin    string
	cfgP   string
	mu     sync.Mutex // guards plugin
	plugin *harness.Plugin
}

func (w *world) restartPlugin(ctx context.Context, kill bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kill {
		w.plugin.Kill()
	}
	p, err := harness.StartPlugin(ctx, w.ctd, w.bin, w.cfgP, w.cfg)
	if err != nil {
		return err
	}
	w.plugin = p
	return nil
}

func run(ctx context.Context, o opts) (err error) {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root")
	}
	tools, err := harness.EnsureContainerdTools()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ncsoak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	w := &world{}
	if w.bin, err = harness.GoBuild(dir, "./cmd/nri-cni", "nri-cni"); err != nil {
		return err
	}
	pauseTar := filepath.Join(dir, "pause.tar")
	if err := harness.BuildPauseImageTar(ctx, dir, pauseTar); err != nil {
		return err
	}
	w.sec = harness.NewSecondary(dir)
	defer w.sec.DeleteBridge()
	if w.cfg, err = harness.NewPluginConfig(dir, tools, w.sec); err != nil {
		return err
	}
	w.cfg.LogLevel = "info"
	w.cfgP = filepath.Join(dir, "nri.conf")
	if err := w.cfg.Write(w.cfgP); err != nil {
		return err
	}
	ctdDir := filepath.Join(dir, "ctd")
	if err := os.MkdirAll(ctdDir, 0o755); err != nil {
		return err
	}
	if w.ctd, err = harness.StartContainerd(ctx, harness.ContainerdOpts{Dir: ctdDir, Tools: tools}); err != nil {
		return err
	}
	defer func() {
		if cerr := w.ctd.Close(context.Background()); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := harness.ImportImage(ctx, filepath.Join(tools.ContainerdDir, "ctr"), w.ctd.Address, pauseTar); err != nil {
		return err
	}
	if err := w.restartPlugin(ctx, false); err != nil {
		return err
	}
	defer func() { w.mu.Lock(); w.plugin.Stop(); w.mu.Unlock() }()
	cri, err := harness.DialCRI(ctx, w.ctd.Address)
	if err != nil {
		return err
	}
	defer cri.Close()

	fmt.Printf("soak: %d cycles, %d workers, %d nri-cni kills, %d containerd restarts\n", o.cycles, o.workers, o.kills, o.restarts)
	// Chaos happens during the first 80% of the cycles; the last 20% run
	// calm so the final plugin process can be watched for growth.
	calm := o.cycles * 8 / 10
	events := map[int]string{}
	for i := 1; i <= o.restarts; i++ {
		events[calm*i/(o.restarts+1)] = "restart-containerd"
	}
	for _, n := range rand.Perm(calm - 1) { // distinct cycles, none shared with a restart
		if len(events) == o.kills+o.restarts {
			break
		}
		if _, taken := events[n+1]; !taken {
			events[n+1] = "kill"
		}
	}
	var done, runFailed atomic.Int64
	var reasonsMu sync.Mutex
	reasons := map[string]int{}
	var baseG, baseRSS int
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for i := 0; i < o.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if err := cycle(ctx, cri, n); err != nil {
					runFailed.Add(1)
					msg := err.Error()
					if len(msg) > 110 {
						msg = msg[:110]
					}
					reasonsMu.Lock()
					reasons[msg]++
					reasonsMu.Unlock()
				}
				done.Add(1)
			}
		}()
	}
	kills, restarts := 0, 0
	for n := 0; n < o.cycles && ctx.Err() == nil; n++ {
		switch events[n] {
		case "kill":
			if err := w.restartPlugin(ctx, true); err != nil {
				return fmt.Errorf("restarting nri-cni: %w", err)
			}
			kills++
		case "restart-containerd":
			if err := w.ctd.Restart(ctx); err != nil {
				return fmt.Errorf("restarting containerd: %w", err)
			}
			restarts++
		}
		if n == calm {
			wg2 := time.Now()
			for done.Load() < int64(calm) && time.Since(wg2) < time.Minute {
				time.Sleep(50 * time.Millisecond)
			}
			w.mu.Lock()
			baseG, baseRSS, err = w.plugin.Stats(ctx)
			w.mu.Unlock()
			if err != nil {
				return err
			}
		}
		work <- n
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)

	// Whatever is left (runs that failed half-way during chaos): clean up.
	if pods, err := cri.ListPods(ctx); err == nil {
		for _, p := range pods {
			_ = cri.StopPod(ctx, p.Id)
			_ = cri.RemovePod(ctx, p.Id)
		}
	}
	var ips []string
	var ports int
	deadline := time.Now().Add(45 * time.Second)
	for {
		ips = w.sec.IPFiles()
		ports, _ = harness.BridgePorts(w.sec.Bridge)
		if len(ips)+ports+len(w.cfg.CacheFiles())+len(w.cfg.StateFiles()) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.mu.Lock()
	endG, endRSS, err := w.plugin.Stats(ctx)
	w.mu.Unlock()
	if err != nil {
		return err
	}
	fmt.Printf("\n%-34s %v\n", "wall time", elapsed.Round(time.Millisecond))
	fmt.Printf("%-34s %d (%.1f/s)\n", "cycles", done.Load(), float64(done.Load())/elapsed.Seconds())
	fmt.Printf("%-34s %d\n", "cycles with a failed step", runFailed.Load())
	for msg, k := range reasons {
		fmt.Printf("    %3d x %s\n", k, msg)
	}
	fmt.Printf("%-34s %d / %d\n", "nri-cni kills / containerd restarts", kills, restarts)
	fmt.Printf("%-34s %d\n", "leaked IP files", len(ips))
	fmt.Printf("%-34s %d\n", "leaked veths on the bridge", ports)
	fmt.Printf("%-34s %d\n", "leaked libcni cache entries", len(w.cfg.CacheFiles()))
	fmt.Printf("%-34s %d\n", "leaked nri-cni records", len(w.cfg.StateFiles()))
	fmt.Printf("%-34s %d -> %d\n", "plugin goroutines (calm phase)", baseG, endG)
	fmt.Printf("%-34s %d KiB -> %d KiB\n", "plugin RSS (calm phase)", baseRSS, endRSS)
	if n := len(ips) + ports + len(w.cfg.CacheFiles()) + len(w.cfg.StateFiles()); n != 0 {
		return fmt.Errorf("%d leaked resources (IPs %v)", n, ips)
	}
	if endG > baseG+5 {
		return fmt.Errorf("goroutines grew %d -> %d", baseG, endG)
	}
	return nil
}

// cycle creates, stops and removes one pod. Steps may fail while nri-cni or
// containerd restart; stop/remove are retried so no pod is left behind.
func cycle(ctx context.Context, cri *harness.CRI, n int) error {
	spec := harness.PodSpec{Name: fmt.Sprintf("soak-%04d", n), Namespace: "soak", UID: harness.RandomName("uid-")}
	id, err := cri.RunPod(ctx, spec)
	// containerd restarting: wait for it rather than burn through cycles.
	for try := 0; status.Code(err) == codes.Unavailable && try < 150; try++ {
		time.Sleep(200 * time.Millisecond)
		id, err = cri.RunPod(ctx, spec)
	}
	if id == "" {
		return err
	}
	var stepErr error
	for _, step := range []func(context.Context, string) error{cri.StopPod, cri.RemovePod} {
		for try := 0; ; try++ {
			if e := step(ctx, id); e == nil {
				break
			} else if try == 50 {
				stepErr = e
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err != nil {
		return err
	}
	return stepErr
}
