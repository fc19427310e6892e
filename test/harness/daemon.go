package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// daemon is a CRI runtime process the harness runs (containerd, crio): in
// its own process group (a ^C to the test does not reach it first), output to
// its log file, ready once its CRI socket answers, stopped by pid. Containerd
// and CRIO embed it; its exported fields and methods are theirs.
type daemon struct {
	Address string // CRI socket
	LogPath string

	name string // "containerd", "crio": in messages
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs argv with env and waits up to wait for the CRI socket.
func (d *daemon) start(ctx context.Context, argv, env []string, wait time.Duration) error {
	logf, err := os.OpenFile(d.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", d.name, err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(d.done) }()

	deadline := time.Now().Add(wait)
	for {
		cri, err := DialCRI(ctx, d.Address)
		if err == nil {
			_, err = cri.ListPods(ctx)
			cri.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("%s exited during start-up; log %s:\n%s", d.name, d.LogPath, d.LogTail(30))
		default:
		}
		if time.Now().After(deadline) {
			d.kill()
			return fmt.Errorf("%s did not answer on %s within %s: %w; log:\n%s", d.name, d.Address, wait, err, d.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pid returns the process's pid.
func (d *daemon) Pid() int { return d.cmd.Process.Pid }

// terminate sends SIGTERM and waits up to grace, then SIGKILL.
func (d *daemon) terminate(grace time.Duration) {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		d.kill()
	}
}

func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

// LogTail returns the last n lines of the log.
func (d *daemon) LogTail(n int) string {
	data, _ := os.ReadFile(d.LogPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CountLog counts the occurrences of s in the log.
func (d *daemon) CountLog(s string) int {
	data, _ := os.ReadFile(d.LogPath)
	return strings.Count(string(data), s)
}

// WaitLog waits until s occurs at least n times in the log.
func (d *daemon) WaitLog(ctx context.Context, s string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for d.CountLog(s) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s log: %q seen %d times, want %d, within %s; tail:\n%s", d.name, s, d.CountLog(s), n, timeout, d.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("waiting for %q in %s's log", s, d.name))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
