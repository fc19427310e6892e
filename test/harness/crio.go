package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

// CRIOOpts configures a private CRI-O.
type CRIOOpts struct {
	// Dir is CRI-O's private directory (storage, sockets, namespaces,
	// configs). Keep it short: unix socket paths are limited to 108 bytes.
	Dir   string
	Tools Tools
	// CRIOBinDir holds crio, pinns and conmon (EnsureCRIO's directory).
	CRIOBinDir string
	// DropInfra is crio.conf's drop_infra_ctr: false keeps a pause (infra)
	// container and NRI gets its pid; true (the kubelet's default setup)
	// runs no infra process and NRI gets Pid 0.
	DropInfra bool
	// PluginRequestTimeout is nri_plugin_request_timeout (default 2s).
	PluginRequestTimeout time.Duration
	// PauseTar is the offline pause image tar (BuildPauseImageTar); empty
	// builds one under Dir.
	PauseTar string
	// LogLevel is crio's log_level (default "info").
	LogLevel string
	// PauseStopSignal is the StopSignal of the pause image loaded into
	// CRI-O (default SIGKILL, like containerd, which always SIGKILLs the
	// sandbox). CRI-O stops the infra container with the image's stop signal
	// and waits up to the StopPodSandbox request's deadline: a SIGTERM that
	// arrives before pause installed its handler (a Stop right after Run;
	// RunPodSandbox can return while the process is still "runc init") is
	// dropped, pause being PID 1, and Stop then hangs until the deadline.
	// "SIGTERM" gives the real pause image's behaviour.
	PauseStopSignal string
}

// CRIO is a CRI-O started by the harness: its own storage, CRI and NRI
// sockets, namespaces dir and primary CNI network (a bridge giving eth0 an
// IP), the offline pause image loaded into its storage.
type CRIO struct {
	Dir            string
	Address        string // CRI socket
	NRISocket      string
	NRIPluginDir   string // pre-launched plugins: NN-name executables
	NRIConfDir     string // their configs
	LogPath        string
	NamespacesDir  string // CRI-O pins pod namespaces under here (netns/, ipcns/, utsns/ …)
	PrimaryNetwork string // name of CRI-O's own network (its CNI cache is /var/lib/cni/results)
	PrimaryBridge  string
	PrimarySubnet  string
	PrimaryIPAMDir string
	DropInfra      bool

	binDir string
	tools  Tools
	cmd    *exec.Cmd
	done   chan struct{}
}

// EnsureCRIO runs test/tools/install-crio.sh (idempotent, cached like
// EnsureTools) and returns the directory holding crio, pinns and conmon.
func EnsureCRIO(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(RepoRoot(), "test/tools/install-crio.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("test/tools/install-crio.sh: %w\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "CRIO_BIN_DIR="); ok && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("test/tools/install-crio.sh printed no CRIO_BIN_DIR: %q", out)
}

// StartCRIO writes CRI-O's config, primary network, runc wrapper and
// signature policy, loads the pause image into its storage and starts it;
// it returns once the CRI socket answers.
func StartCRIO(ctx context.Context, o CRIOOpts) (*CRIO, error) {
	if o.PluginRequestTimeout == 0 {
		o.PluginRequestTimeout = 2 * time.Second
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	c := &CRIO{
		Dir: o.Dir, Address: filepath.Join(o.Dir, "crio.sock"), NRISocket: filepath.Join(o.Dir, "nri.sock"),
		NRIPluginDir: filepath.Join(o.Dir, "nri-plugins"), NRIConfDir: filepath.Join(o.Dir, "nri-conf.d"),
		LogPath: filepath.Join(o.Dir, "crio.log"), NamespacesDir: filepath.Join(o.Dir, "ns"),
		PrimaryNetwork: RandomName("criop"), PrimaryBridge: RandomName("criob"),
		PrimarySubnet: RandomSubnet(220), PrimaryIPAMDir: filepath.Join(o.Dir, "ipam"),
		DropInfra: o.DropInfra, binDir: o.CRIOBinDir, tools: o.Tools,
	}
	if err := c.writeFiles(o); err != nil {
		return nil, fmt.Errorf("crio files under %s: %w", o.Dir, err)
	}
	if o.PauseTar == "" {
		o.PauseTar = filepath.Join(o.Dir, "pause.tar")
		if err := BuildPauseImageTar(ctx, filepath.Join(o.Dir, "pause-build"), o.PauseTar); err != nil {
			return nil, err
		}
	}
	if o.PauseStopSignal == "" {
		o.PauseStopSignal = "SIGKILL"
	}
	pauseTar := c.path("pause-crio.tar")
	if err := withStopSignal(o.PauseTar, pauseTar, o.PauseStopSignal); err != nil {
		return nil, err
	}
	if err := c.loadImage(ctx, pauseTar); err != nil {
		_ = UnmountUnder(c.Dir)
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	return c, nil
}

// env is the environment of crio and podman: CONTAINERS_STORAGE_CONF
// points at the private storage.conf so neither reads the host's.
func (c *CRIO) env() []string {
	return []string{
		"PATH=" + c.tools.RuncDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CONTAINERS_STORAGE_CONF=" + filepath.Join(c.Dir, "storage.conf"),
		"CONTAINERS_REGISTRIES_CONF=" + filepath.Join(c.Dir, "registries.conf"),
		"HOME=" + c.Dir,
	}
}

// loadImage loads the image tar into CRI-O's storage with podman. podman
// runs in a private mount namespace with a tmpfs over /var/lib: it keeps
// its blob-info cache in /var/lib/containers/cache whatever its --root, and
// the host's is not ours to write. Its transient mounts die with it.
func (c *CRIO) loadImage(ctx context.Context, tar string) error {
	script := `mount -t tmpfs -o size=16m nri-cni-podman /var/lib && exec podman "$@"`
	args := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "podman"},
		append(c.podmanArgs(), "load", "-i", tar)...)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = c.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("podman load %s into %s: %w\n%s", tar, c.Dir, err, out)
	}
	return nil
}

// withStopSignal copies the pause image tar src to dst with its config's
// StopSignal set.
func withStopSignal(src, dst, signal string) error {
	img, err := build.ReadArchive(src, PauseImage)
	if err != nil {
		return fmt.Errorf("read pause image %s: %w", src, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("pause image config: %w", err)
	}
	cfg := cf.Config
	cfg.StopSignal = signal
	if img, err = mutate.Config(img, cfg); err != nil {
		return fmt.Errorf("pause image StopSignal %s: %w", signal, err)
	}
	_, err = build.WriteArchive(img, PauseImage, dst)
	return err
}

func (c *CRIO) podmanArgs() []string {
	return []string{
		"--root", filepath.Join(c.Dir, "root"), "--runroot", filepath.Join(c.Dir, "runroot"),
		"--storage-driver", "overlay", "--tmpdir", filepath.Join(c.Dir, "podman-tmp"),
		"--events-backend", "none", "--cgroup-manager", "cgroupfs",
	}
}

func (c *CRIO) start(ctx context.Context) error {
	logf, err := os.OpenFile(c.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(c.binDir, "crio"),
		"--config", filepath.Join(c.Dir, "crio.conf"), "--config-dir", filepath.Join(c.Dir, "crio.conf.d"))
	cmd.Env = c.env()
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a ^C to the test does not reach crio first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting crio: %w", err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.done) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		cri, err := DialCRI(ctx, c.Address)
		if err == nil {
			_, err = cri.ListPods(ctx)
			cri.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("crio exited during start-up; log %s:\n%s", c.LogPath, c.LogTail(30))
		default:
		}
		if time.Now().After(deadline) {
			c.kill()
			return fmt.Errorf("crio did not answer on %s within 60s: %w; log:\n%s", c.Address, err, c.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pid returns crio's pid.
func (c *CRIO) Pid() int { return c.cmd.Process.Pid }

// Restart stops crio (SIGTERM, by pid) and starts it again with the same
// config; pods and their conmon processes keep running.
func (c *CRIO) Restart(ctx context.Context) error {
	c.terminate(15 * time.Second)
	return c.start(ctx)
}

func (c *CRIO) terminate(grace time.Duration) {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.kill()
	}
}

func (c *CRIO) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Name implements Runtime.
func (c *CRIO) Name() string { return "crio" }

// CRIAddress implements Runtime.
func (c *CRIO) CRIAddress() string { return c.Address }

// NRIAddress implements Runtime.
func (c *CRIO) NRIAddress() string { return c.NRISocket }

// NRIPluginPath implements Runtime.
func (c *CRIO) NRIPluginPath() string { return c.NRIPluginDir }

// NRIConfigPath implements Runtime.
func (c *CRIO) NRIConfigPath() string { return c.NRIConfDir }

// PluginSynced implements Runtime: CRI-O logs NRI's own adaptation line,
// the same text as containerd's (both vendor containerd/nri).
func (c *CRIO) PluginSynced(name string) string { return PluginSynced(name) }

// PrelaunchedSynced implements Runtime.
func (c *CRIO) PrelaunchedSynced(name string) string { return PrelaunchedSynced(name) }

// LogTail returns the last n lines of crio's log.
func (c *CRIO) LogTail(n int) string {
	data, _ := os.ReadFile(c.LogPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CountLog counts the occurrences of s in crio's log.
func (c *CRIO) CountLog(s string) int {
	data, _ := os.ReadFile(c.LogPath)
	return strings.Count(string(data), s)
}

// WaitLog waits until s occurs at least n times in crio's log.
func (c *CRIO) WaitLog(ctx context.Context, s string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for c.CountLog(s) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("crio log: %q seen %d times, want %d, within %s; tail:\n%s", s, c.CountLog(s), n, timeout, c.LogTail(20))
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("waiting for %q in crio's log", s))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
