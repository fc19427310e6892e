package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/harness"
)

// benchScale: 4. RSS of `nri-cni run` idle and holding n records (all live,
// listed by the runtime's Synchronize), and the time of that resync (GC over
// n pods; no CNI exec: every record is valid and the network is CNI 1.0).
func benchScale(ctx context.Context, e *env, rep *report, n int) error {
	dir := filepath.Join(e.dir, "scale")
	sec := harness.NewSecondary(dir)
	defer sec.DeleteBridge()
	cfg, err := harness.NewPluginConfig(dir, e.tools, sec)
	if err != nil {
		return err
	}
	cfg.LogLevel = "info"
	cfgPath := filepath.Join(dir, "nri.conf")
	if err := cfg.Write(cfgPath); err != nil {
		return err
	}
	ns, err := testutils.NewNS()
	if err != nil {
		return err
	}
	defer func() { _ = ns.Close(); _ = testutils.UnmountNS(ns) }()
	id, err := netns.Identify(ns.Path())
	if err != nil {
		return err
	}
	var pods []*api.PodSandbox
	runPlugin := func() (rss int, log string, err error) {
		rs, err := startRuntimeSide(filepath.Join(dir, fmt.Sprintf("rt%d", len(pods))), func() []*api.PodSandbox { return pods })
		if err != nil {
			return 0, "", err
		}
		defer rs.r.Stop()
		_ = os.Remove(cfg.LogFile)
		cmd := exec.Command(e.bin, "run", "--config", cfgPath, "--socket", rs.sock)
		if err := cmd.Start(); err != nil {
			return 0, "", err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		if err := rs.waitPlugin(); err != nil {
			return 0, "", err
		}
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(cfg.Log(), "resync with the runtime") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // settle
		rss, err = rssKiB(cmd.Process.Pid)
		return rss, cfg.Log(), err
	}

	idle, _, err := runPlugin()
	if err != nil {
		return err
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return err
	}
	now := time.Now()
	for i := 0; i < n; i++ {
		pid := fmt.Sprintf("scale%06d", i)
		if err := store.Put(&state.Record{ID: pid, Kind: "pod", Namespace: "bench", Name: "pod-" + pid, UID: "uid-" + pid,
			Netns: ns.Path(), NetnsDev: id.Dev, NetnsIno: id.Ino, Phase: state.PhaseAttached, Created: now, Updated: now,
			Networks: []state.Network{{Name: sec.Name, IfName: "net1", IPs: []string{"10.0.0.1/24"}}}}); err != nil {
			return err
		}
		pods = append(pods, &api.PodSandbox{Id: pid, Name: "pod-" + pid, Namespace: "bench", Uid: "uid-" + pid,
			Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: ns.Path()}}}})
	}
	loaded, log, err := runPlugin()
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`msg="resync with the runtime done".*duration=([0-9.]+[mµn]?s)`).FindStringSubmatch(log)
	if m == nil {
		return fmt.Errorf("no resync line in the log:\n%s", log)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		return err
	}
	if recs, _ := store.List(); len(recs) != n {
		return fmt.Errorf("the resync dropped live records: %d left of %d", len(recs), n)
	}
	s := "4 scale"
	rep.check(s, "RSS idle", float64(idle)/1024, "MiB", 20, "<= 20 MiB")
	rep.check(s, fmt.Sprintf("RSS with %d records", n), float64(loaded)/1024, "MiB", 40, "<= 40 MiB")
	rep.check(s, fmt.Sprintf("Synchronize + GC over %d pods", n), float64(d.Microseconds())/1000, "ms", 200, "<= 200 ms")
	return nil
}
