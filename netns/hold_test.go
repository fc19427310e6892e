package netns_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nri-cni/nri-cni/netns"
)

// A held namespace outlives its pin (the runtime unmounting it after
// StopPodSandbox), a child process enters it through the held path, and it
// goes at Release.
func TestHoldOutlivesThePin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates a network namespace with ip netns); run `sudo make test`")
	}
	name := fmt.Sprintf("nri-cni-hold-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	pinned := "/run/netns/" + name
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	})
	if out, err := exec.Command("ip", "netns", "exec", name, "ip", "link", "add", "holdprobe0", "type", "veth", "peer", "name", "holdprobe1").CombinedOutput(); err != nil {
		t.Fatalf("a link in the namespace: %v: %s", err, out)
	}
	id, err := netns.Identify(pinned)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := netns.Hold(pinned, netns.ID{Dev: id.Dev, Ino: id.Ino + 1}); !errors.Is(err, netns.ErrMismatch) {
		t.Errorf("Hold of another namespace than recorded = %v, want ErrMismatch", err)
	}
	h, err := netns.Hold(pinned, id)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	defer h.Release()
	if !strings.HasPrefix(h.Path, fmt.Sprintf("/proc/%d/fd/", os.Getpid())) || h.ID != id {
		t.Errorf("Hold = %+v, want /proc/<pid>/fd/N and ID %+v", h, id)
	}

	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v: %s", err, out)
	}
	deleted = true
	if _, err := os.Stat(pinned); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the pin is still there: %v", err)
	}
	if got, err := netns.Identify(h.Path); err != nil || got != id {
		t.Fatalf("the held namespace after its pin went: %+v, %v", got, err)
	}
	// A child (as a CNI plugin is run) enters it through the held path.
	out, err := exec.Command("nsenter", "--net="+h.Path, "ip", "-o", "link", "show", "holdprobe0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "holdprobe0") {
		t.Fatalf("entering the held namespace: %v: %s", err, out)
	}

	h.Release()
	if _, err := netns.Identify(h.Path); err == nil {
		t.Errorf("the held path still names a namespace after Release")
	}
	h.Release() // twice is fine
}
