package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/nri-cni/nri-cni/netns"
)

// NewNetNS creates a uniquely named network namespace (bind-mounted under
// /run/netns) and removes it when the test ends.
func NewNetNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("creating a netns: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

// SleepIn starts `sleep` inside the namespace at path (a pod's "pause"
// process) and returns its pid; the process is killed, by pid, at cleanup.
func SleepIn(t testing.TB, path string) int {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+path, "sleep", "600")
	// No Pdeathsig: it fires when the forking OS thread exits, and netns
	// helpers retire locked threads. Cleanup kills the child by pid.
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a process in %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	// nsenter joins the namespace after it starts: wait until it has.
	want, err := netns.Identify(path)
	if err != nil {
		t.Fatal(err)
	}
	pidPath := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	Eventually(t, 5*time.Second, "the process to join "+path, func() bool {
		got, err := netns.Identify(pidPath)
		return err == nil && got == want
	})
	return cmd.Process.Pid
}

// DeleteNetNS removes a namespace made by NewNetNS now (as the runtime does
// at teardown); the test's cleanup then finds nothing to do.
func DeleteNetNS(t testing.TB, n ns.NetNS) {
	t.Helper()
	_ = n.Close() // an open fd on the bind mount makes the unmount EBUSY
	if err := testutils.UnmountNS(n); err != nil {
		t.Fatal(err)
	}
}

// Exists reports whether path exists.
func Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
