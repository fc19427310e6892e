// Command demo shows nri-cni's main job end to end on this machine (root):
// a private containerd 2.x with nri-cni installed as a pre-launched NRI
// drop-in, two pods that get a second interface (net1) on a secondary
// network, a ping between them over it, and the addresses released on
// teardown. It cleans up everything it created, also on failure.
//
//	make demo
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nri-cni/nri-cni/test/harness"
)

func main() {
	// `make demo | head` must not kill the demo before it cleans up: a
	// write to a closed pipe then fails instead of raising SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\ndemo OK")
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
func info(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func run(ctx context.Context) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("run as root: the demo starts containerd and creates network namespaces")
	}
	step("the pinned containerd, runc and CNI plugins (test/tools/install.sh demo: built once, then cached)")
	tools, err := harness.EnsureContainerdTools()
	if err != nil {
		return err
	}
	info("%s", tools.Versions())
	dir, err := os.MkdirTemp("", "ncdemo")
	if err != nil {
		return err
	}
	defer func() {
		step("cleaning up %s", dir)
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = rerr
		}
	}()

	step("building nri-cni and the pause image (offline)")
	bin, err := harness.GoBuild(dir, "./cmd/nri-cni", "nri-cni")
	if err != nil {
		return err
	}
	pauseTar := filepath.Join(dir, "pause.tar")
	if err := harness.BuildPauseImageTar(ctx, dir, pauseTar); err != nil {
		return err
	}

	step("installing nri-cni as a pre-launched NRI plugin (10-nri-cni) with a secondary network")
	sec := harness.NewSecondary(dir)
	defer sec.DeleteBridge()
	cfg, err := harness.NewPluginConfig(dir, tools, sec)
	if err != nil {
		return err
	}
	cfg.LogLevel = "info"
	ctdDir := filepath.Join(dir, "ctd")
	for _, d := range []string{filepath.Join(ctdDir, "nri-plugins"), filepath.Join(ctdDir, "nri-conf.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ctdDir, "nri-plugins", "10-nri-cni"), data, 0o755); err != nil {
		return err
	}
	if err := cfg.Write(filepath.Join(ctdDir, "nri-conf.d", "10-nri-cni.conf")); err != nil {
		return err
	}
	info("secondary network %q: bridge %s, subnet %s", sec.Name, sec.Bridge, sec.Subnet)

	step("starting a private containerd with NRI enabled")
	ctd, err := harness.StartContainerd(ctx, harness.ContainerdOpts{Dir: ctdDir, Tools: tools})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping containerd (pid %d) and removing what it mounted", ctd.Pid())
		if cerr := ctd.Close(context.Background()); cerr != nil && err == nil {
			err = cerr
		}
	}()
	info("primary network (containerd's own, eth0): %s", ctd.PrimarySubnet)
	if err := harness.ImportImage(ctx, filepath.Join(tools.ContainerdDir, "ctr"), ctd.Address, pauseTar); err != nil {
		return err
	}
	if err := ctd.WaitLog(ctx, harness.PrelaunchedSynced("10-nri-cni"), 1, 15*time.Second); err != nil {
		return fmt.Errorf("nri-cni did not register: %w\n%s", err, cfg.Log())
	}
	info("containerd launched nri-cni; it logs to %s", cfg.LogFile)

	cri, err := harness.DialCRI(ctx, ctd.Address)
	if err != nil {
		return err
	}
	defer cri.Close()

	step("creating two pods through CRI")
	type pod struct {
		name, id string
		st       *harness.PodStatus
		net1     net.IP
	}
	pods := []*pod{{name: "demo-a"}, {name: "demo-b"}}
	for _, p := range pods {
		if p.id, err = cri.RunPod(ctx, harness.PodSpec{Name: p.name, Namespace: "demo", UID: harness.RandomName("uid-")}); err != nil {
			return err
		}
		if p.st, err = cri.PodStatus(ctx, p.id); err != nil {
			return err
		}
		itf, ok, err := harness.PodIface(p.st.NetnsPath, "net1")
		if err != nil {
			return err
		}
		if !ok || len(itf.Addrs) == 0 {
			return fmt.Errorf("pod %s has no net1 address\n%s", p.name, cfg.Log())
		}
		p.net1 = itf.Addrs[0].IP
		info("pod %-7s sandbox %.12s  eth0 %-15s (runtime)  net1 %s (nri-cni)", p.name, p.id, p.st.IP, itf.Addrs[0].String())
	}
	info("secondary IPs allocated: %d", len(sec.IPFiles()))

	step("ping %s (demo-b's net1) from demo-a's network namespace", pods[1].net1)
	if err := harness.Ping(pods[0].st.NetnsPath, pods[1].net1); err != nil {
		return err
	}
	info("reply received over net1")

	step("stopping and removing both pods")
	for _, p := range pods {
		if err := cri.StopPod(ctx, p.id); err != nil {
			return err
		}
		if err := cri.RemovePod(ctx, p.id); err != nil {
			return err
		}
	}
	left := sec.IPFiles()
	info("secondary IPs allocated: %d; nri-cni records left: %d", len(left), len(cfg.StateFiles()))
	if len(left) != 0 {
		return fmt.Errorf("secondary IPs not released: %v", left)
	}
	return nil
}
