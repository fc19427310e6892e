package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nri-cni/nri-cni/test/harness"
)

// hookMargin is nri-cni's own work per hook invocation above the floor (a
// no-op invocation of the same binary), in ms.
const hookMargin = 5.0

// benchHook: 5. `nri-cni hook createRuntime` + `poststop` as processes vs the
// same chain's ADD+DEL in-process: the per-invocation overhead, within the
// no-op invocation's time (the floor, measured in the same run) + 5 ms.
func benchHook(ctx context.Context, e *env, rep *report, n int) error {
	bridge := harness.RandomName("ncbh")
	c, err := newChain(ctx, e, "hook", bridgeConf("benchhook", bridge, harness.RandomSubnet(240), filepath.Join(e.dir, "ipam-h")), bridge)
	if err != nil {
		return err
	}
	defer c.close()
	sleeper := exec.Command("nsenter", "--net="+c.netns.Path(), "sleep", "3600")
	if err := sleeper.Start(); err != nil {
		return err
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	time.Sleep(200 * time.Millisecond) // nsenter has joined the netns
	cfgPath := filepath.Join(e.dir, "hook", "nri.conf")
	conf := fmt.Sprintf("confDir: %s\nbinDirs: [%s]\ncacheDir: %s\nstateDir: %s\n", filepath.Join(e.dir, "hook", "net.d"),
		e.tools.CNIDir, filepath.Join(e.dir, "hook", "hcache"), filepath.Join(e.dir, "hook", "hstate"))
	if err := os.WriteFile(cfgPath, []byte(conf), 0o644); err != nil {
		return err
	}
	invoke := func(stage string, st specs.State) error {
		data, _ := json.Marshal(st)
		cmd := exec.CommandContext(ctx, e.bin, "hook", "--config", cfgPath, stage)
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("hook %s: %w: %s", stage, err, out)
		}
		return nil
	}
	hookPair := func(i int) (time.Duration, error) {
		st := specs.State{ID: fmt.Sprintf("hook%06d", i), Pid: sleeper.Process.Pid, Status: specs.StateCreating}
		start := time.Now()
		if err := invoke("createRuntime", st); err != nil {
			return 0, err
		}
		st.Status, st.Pid = specs.StateStopped, 0
		if err := invoke("poststop", st); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	noop := func(int) (time.Duration, error) {
		start := time.Now()
		err := invoke("poststart", specs.State{ID: "noop", Status: specs.StateRunning})
		return time.Since(start), err
	}
	raw, hooks, err := interleave(n, func(i int) (time.Duration, error) { return c.rawPair(ctx, fmt.Sprintf("rawh%06d", i)) }, hookPair)
	if err != nil {
		return err
	}
	_, noops, err := interleave(n, func(int) (time.Duration, error) { return 0, nil }, noop)
	if err != nil {
		return err
	}
	s := "5 hook"
	rep.add(Row{Section: s, Metric: "chain ADD+DEL in-process p50", Value: pct(raw, 50), Unit: "ms"})
	rep.add(Row{Section: s, Metric: "hook createRuntime+poststop p50", Value: pct(hooks, 50), Unit: "ms"})
	rep.add(Row{Section: s, Metric: "no-op hook invocation p50", Value: pct(noops, 50), Unit: "ms"})
	_, delta := paired(raw, hooks)
	rep.add(Row{Section: s, Metric: "overhead per invocation (p50s)", Value: (pct(hooks, 50) - pct(raw, 50)) / 2, Unit: "ms"})
	// The floor is a hook process that does nothing (the binary's start:
	// what any hook costs); nri-cni's own work per invocation (the
	// record, its lock, the netns) may add hookMargin.
	floor := pct(noops, 50)
	rep.check(s, "overhead per invocation (paired median, 2 per container)", delta/2, "ms", floor+hookMargin,
		fmt.Sprintf("<= floor %.1f + %.0f ms", floor, hookMargin))
	return nil
}
