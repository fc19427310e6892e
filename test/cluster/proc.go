package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one component the cluster started: its own process group, output
// to a log file in the cluster dir, stopped by pid.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{}
}

func newProc(dir, name, bin string, env []string, args ...string) *proc {
	return &proc{name: name, bin: bin, args: args, env: env, logPath: filepath.Join(dir, name+".log")}
}

// start runs the process (appending to its log).
func (p *proc) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("%s log: %w", p.name, err)
	}
	defer logf.Close()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a ^C to the test does not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
	return nil
}

// running reports whether the process was started and has not exited.
func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// pid is the process id, 0 when it is not running.
func (p *proc) pid() int {
	if !p.running() {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop sends SIGTERM to the pid, then SIGKILL after grace; it waits for the
// exit. A process that is not running is left alone.
func (p *proc) stop(grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited returns an error with the log's tail when the process has exited.
func (p *proc) exited() error {
	if p.cmd == nil || p.running() {
		return nil
	}
	return fmt.Errorf("%s exited (%v); log %s:\n%s", p.name, p.cmd.ProcessState, p.logPath, p.logTail(25))
}

func (p *proc) logTail(n int) string {
	data, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RSSKiB is VmRSS of pid in KiB (0 when unknown).
func RSSKiB(pid int) int {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
