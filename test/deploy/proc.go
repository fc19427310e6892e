package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Proc is a started process (a container's, see Node.Command).
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
}

// Start starts cmd in its own process group and reaps it when it exits.
func Start(cmd *exec.Cmd) (*Proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Until returns a context that ends when ctx does or the process exits,
// for waits that should give up early on a crash.
func (p *Proc) Until(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-c.Done():
		}
	}()
	return c, cancel
}

// Kill sends SIGKILL (by pid) unless the process has exited, and waits.
func (p *Proc) Kill() {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(p.Pid(), syscall.SIGKILL)
		<-p.done
	}
}

// Terminate sends SIGTERM and waits up to grace for a successful exit.
func (p *Proc) Terminate(grace time.Duration) error {
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("pid %d did not exit within %s of SIGTERM", p.Pid(), grace)
	}
	if st := p.Cmd.ProcessState; !st.Success() {
		return fmt.Errorf("pid %d exited with %s after SIGTERM", p.Pid(), st)
	}
	return nil
}

// ContainerdNRITable runs `containerd --config FILE config dump` on a
// config with the given text (written to dir/name.toml) and returns the
// NRI plugin's table as containerd resolved it.
func ContainerdNRITable(containerd, dir, name, text string) (string, error) {
	out, err := ContainerdConfigDump(containerd, dir, name, text)
	if err != nil {
		return "", err
	}
	table := TOMLTable(out, "plugins.'io.containerd.nri.v1.nri'")
	if table == "" {
		return "", fmt.Errorf("containerd config dump (%s): no NRI table in:\n%s", name, out)
	}
	return table, nil
}

// ContainerdConfigDump runs `containerd --config FILE config dump` on a
// config with the given text (written to dir/name.toml) and returns the
// whole config as containerd resolved it (tables as plugins.'id'.sub).
func ContainerdConfigDump(containerd, dir, name, text string) (string, error) {
	file := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command(containerd, "--config", file, "config", "dump").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("containerd config dump (%s): %w\n%s", name, err, out)
	}
	return string(out), nil
}
