package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/netns"
)

// PidResolver is what StopContainer needs of the netns resolver: that a
// pid lives in a sandbox's pinned network namespace (and it is not the
// host's).
type PidResolver interface {
	ResolveRunning(pid uint32, pinned string) (netns.Netns, error)
}

// killWait bounds the wait for a process to go after SIGKILL.
const killWait = 5 * time.Second

// StopContainer stops the process pid, a container of the sandbox whose
// network namespace is pinned, as a runtime's StopContainer does: SIGTERM,
// then SIGKILL if it is still there after grace. It reports whether SIGKILL
// was needed. A process that is already gone is not an error.
//
// The process is held by a pidfd from before it is checked to the last
// signal, so a pid reused meanwhile is never signalled; and it must live in
// the pod's namespace (never the host's), or it is left alone.
func StopContainer(ctx context.Context, res PidResolver, pinned string, pid uint32, grace time.Duration) (killed bool, err error) {
	if pid == 0 {
		return false, errors.New("the runtime reports no pid for the container")
	}
	fd, err := unix.PidfdOpen(int(pid), 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if _, err := res.ResolveRunning(pid, pinned); err != nil {
		return false, fmt.Errorf("pid %d is not in the pod's network namespace %s, not signalled: %w", pid, pinned, err)
	}
	// Still the process that was checked: a pid is not reused while its
	// process (or zombie) holds it, and the pidfd refers to that process.
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		return false, gone(pid, err)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		return false, gone(pid, err)
	}
	if exited, err := waitExit(ctx, fd, grace); exited || err != nil {
		return false, err
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return true, gone(pid, err)
	}
	exited, err := waitExit(ctx, fd, killWait)
	if err == nil && !exited {
		err = fmt.Errorf("pid %d still there %s after SIGKILL", pid, killWait)
	}
	return true, err
}

// gone: ESRCH means the process went by itself (nil); other errors are
// returned.
func gone(pid uint32, err error) error {
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return fmt.Errorf("signalling pid %d: %w", pid, err)
}

// waitExit waits up to d for the process behind the pidfd to exit (the
// pidfd becomes readable), or for ctx to end.
func waitExit(ctx context.Context, fd int, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		step := min(left, 200*time.Millisecond)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(step.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return true, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
}
