package cli

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// awaitCmd: `nri-cni await --socket PATH --sandbox ID [--timeout D]`, the
// OCI createRuntime hook nri-cni adds to a container whose pod is still
// being attached (failClosed.hookSocket): it returns 0 once nri-cni says
// the pod is attached, else 1 with the reason on stderr, which the runtime
// reports as the container's start error (the kubelet retries). nri-cni
// restarting meanwhile is waited for. The OCI state on stdin is not needed.
func awaitCmd(ctx context.Context, a *app, args []string) int {
	fs := flag.NewFlagSet("await", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	socket := fs.String("socket", "", "nri-cni's await socket (failClosed.hookSocket)")
	sandbox := fs.String("sandbox", "", "the pod sandbox to wait for")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || *sandbox == "" || fs.NArg() > 0 || *timeout <= 0 {
		return a.fail("await: --socket and --sandbox are required (an OCI hook nri-cni adds to containers)")
	}
	go func() { _, _ = io.Copy(io.Discard, a.stdin) }() // the runtime's OCI state
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	for {
		reply, err := askAwait(ctx, *socket, *sandbox)
		switch {
		case err == nil && reply == "ok":
			return 0
		case err == nil:
			return a.fail("await: pod sandbox %s: %s", *sandbox, strings.TrimPrefix(reply, "error "))
		}
		// nri-cni not there (restarting) or gone mid-answer: ask again.
		select {
		case <-ctx.Done():
			return a.fail("await: pod sandbox %s: nri-cni did not confirm its networks within %s (last: %v)", *sandbox, *timeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// askAwait asks nri-cni once and returns its answer line.
func askAwait(ctx context.Context, socket, sandbox string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return "", err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	ms := time.Until(deadline).Milliseconds()
	if ms <= 0 {
		return "", ctx.Err()
	}
	if _, err := fmt.Fprintf(c, "await %s %d\n", sandbox, ms); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}
