package harness

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
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
	// HooksDir is crio.conf's hooks_dir (hooks.d JSON files); empty: an
	// empty private dir under Dir.
	HooksDir string
	// NRISocket is nri_listen; "" = Dir/nri.sock. A Kubernetes node puts it
	// in a directory of its own: the DaemonSet mounts the socket's directory,
	// and Dir also holds the storage and the pinned namespaces.
	NRISocket string
	// RuncBinary is the runc the wrapper execs; "" = Tools.RuncDir/runc.
	RuncBinary string
	// DropIns are files copied (under their own names) into the private
	// crio.conf.d that crio reads after crio.conf, overriding it key by key
	// (e.g. the node drop-in deploy/node/crio/10-nri-cni.conf, which sets no
	// socket, dir or timeout, so the private ones of crio.conf stay).
	DropIns []string
}

// CRIO is a CRI-O started by the harness: its own storage, CRI and NRI
// sockets, namespaces dir and primary CNI network (a bridge giving eth0 an
// IP), the offline pause image loaded into its storage.
type CRIO struct {
	daemon         // Address (CRI socket), LogPath, Pid, LogTail, CountLog, WaitLog
	Dir            string
	NRISocket      string
	NRIPluginDir   string // pre-launched plugins: NN-name executables
	NRIConfDir     string // their configs
	NamespacesDir  string // CRI-O pins pod namespaces under here (netns/, ipcns/, utsns/ …)
	PrimaryNetwork string // name of CRI-O's own network (its CNI cache is /var/lib/cni/results)
	PrimaryBridge  string
	PrimarySubnet  string
	PrimaryIPAMDir string
	HooksDir       string // crio.conf's hooks_dir
	DropInfra      bool

	binDir string
	tools  Tools
	runc   string // what the runc wrapper execs
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
		daemon: daemon{name: "crio", Address: filepath.Join(o.Dir, "crio.sock"), LogPath: filepath.Join(o.Dir, "crio.log")},
		Dir:    o.Dir, NRISocket: o.NRISocket,
		NRIPluginDir: filepath.Join(o.Dir, "nri-plugins"), NRIConfDir: filepath.Join(o.Dir, "nri-conf.d"),
		NamespacesDir:  filepath.Join(o.Dir, "ns"),
		PrimaryNetwork: RandomName("criop"), PrimaryBridge: RandomName("criob"),
		PrimarySubnet: RandomSubnet(220), PrimaryIPAMDir: filepath.Join(o.Dir, "ipam"),
		HooksDir: o.HooksDir, DropInfra: o.DropInfra, binDir: o.CRIOBinDir, tools: o.Tools,
	}
	if c.HooksDir == "" {
		c.HooksDir = filepath.Join(o.Dir, "hooks.d")
	}
	if c.NRISocket == "" {
		c.NRISocket = filepath.Join(o.Dir, "nri.sock")
	}
	c.runc = o.RuncBinary
	if c.runc == "" {
		c.runc = filepath.Join(o.Tools.RuncDir, "runc")
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
	if err := c.LoadImage(ctx, pauseTar); err != nil {
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

// LoadImage loads the image tar into CRI-O's storage with podman. podman
// runs in a private mount namespace with a tmpfs over /var/lib: it keeps
// its blob-info cache in /var/lib/containers/cache whatever its --root, and
// the host's is not ours to write. Its transient mounts die with it.
func (c *CRIO) LoadImage(ctx context.Context, tar string) error {
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
	return c.daemon.start(ctx, []string{filepath.Join(c.binDir, "crio"),
		"--config", filepath.Join(c.Dir, "crio.conf"), "--config-dir", filepath.Join(c.Dir, "crio.conf.d")},
		c.env(), 60*time.Second)
}

// Restart stops crio (SIGTERM, by pid) and starts it again with the same
// config; pods and their conmon processes keep running.
func (c *CRIO) Restart(ctx context.Context) error {
	c.terminate(15 * time.Second)
	return c.start(ctx)
}

// Name implements Runtime.
func (c *CRIO) Name() string { return "crio" }

// NetnsDir is where CRI-O pins pod network namespaces (pinns).
func (c *CRIO) NetnsDir() string { return filepath.Join(c.NamespacesDir, "netns") }

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
