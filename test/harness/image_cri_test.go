package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPauseImageAndCRI proves the harness's own parts against a real
// containerd: the offline pause image imports and runs pod sandboxes, and
// the CRI client reports state, IP, pid and the netns path correctly.
func TestPauseImageAndCRI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts a private containerd, runc and CNI bridge networking")
	}
	tools, err := EnsureContainerdTools()
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "ctd")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })

	tarPath := filepath.Join(dir, "pause.tar")
	must(t, BuildPauseImageTar(ctx, dir, tarPath))
	st1, _ := os.Stat(tarPath)
	must(t, BuildPauseImageTar(ctx, dir, tarPath))
	if st2, _ := os.Stat(tarPath); !st2.ModTime().Equal(st1.ModTime()) {
		t.Errorf("second BuildPauseImageTar rebuilt a fresh tar")
	}
	checkPauseSignals(t, filepath.Join(dir, "pause"))

	c, err := StartContainerd(ctx, ContainerdOpts{Dir: filepath.Join(dir, "c"), Tools: tools})
	must(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("containerd log tail:\n%s", c.LogTail(40))
		}
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ctr := filepath.Join(tools.ContainerdDir, "ctr")
	must(t, ImportImage(ctx, ctr, c.Address, tarPath))
	out, err := exec.Command(ctr, "--address", c.Address, "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil || !strings.Contains(string(out), PauseImage) {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	cri, err := DialCRI(ctx, c.Address)
	must(t, err)
	defer cri.Close()

	id, err := cri.RunPod(ctx, PodSpec{Name: "probe", Namespace: "default", UID: RandomName("uid-"),
		Labels: map[string]string{"app": "probe"}})
	must(t, err)
	ps, err := cri.PodStatus(ctx, id)
	must(t, err)
	if ps.State != "SANDBOX_READY" || ps.Pid <= 0 {
		t.Errorf("state %q pid %d, want SANDBOX_READY and a pid", ps.State, ps.Pid)
	}
	_, subnet, _ := net.ParseCIDR(c.PrimarySubnet)
	if ip := net.ParseIP(ps.IP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("pod IP %q not in %s", ps.IP, c.PrimarySubnet)
	}
	if !sameFile(ps.NetnsPath, fmt.Sprintf("/proc/%d/ns/net", ps.Pid)) {
		t.Errorf("netns %q is not the sandbox process's network namespace", ps.NetnsPath)
	}
	if pods, err := cri.ListPods(ctx); err != nil || len(pods) != 1 || pods[0].Id != id {
		t.Errorf("ListPods = %v, %v; want just %s", pods, err, id)
	}
	must(t, cri.StopPod(ctx, id))
	must(t, cri.RemovePod(ctx, id))

	hid, err := cri.RunPod(ctx, PodSpec{Name: "hostprobe", Namespace: "default", UID: RandomName("uid-"), HostNetwork: true})
	must(t, err)
	hs, err := cri.PodStatus(ctx, hid)
	must(t, err)
	if hs.State != "SANDBOX_READY" || !hs.HostNetwork {
		t.Errorf("host-network pod: %+v", hs)
	}
	if hs.NetnsPath != "" && !sameFile(hs.NetnsPath, "/proc/self/ns/net") {
		t.Errorf("host-network pod netns %q is not the host's", hs.NetnsPath)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkPauseSignals: ignored signals must not kill pause; SIGTERM ends it
// with status 0.
func checkPauseSignals(t *testing.T, bin string) {
	cmd := exec.Command(bin)
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(100 * time.Millisecond) // let it install its handlers
	for _, s := range []unix.Signal{unix.SIGHUP, unix.SIGUSR1, unix.SIGPIPE, unix.SIGCHLD} {
		_ = cmd.Process.Signal(s)
	}
	select {
	case err := <-done:
		t.Fatalf("pause died on an ignored signal: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	_ = cmd.Process.Signal(unix.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pause on SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause ignored SIGTERM")
	}
}

func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}
