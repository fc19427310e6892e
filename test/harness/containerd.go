package harness

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ContainerdOpts configures a private containerd.
type ContainerdOpts struct {
	// Dir is the containerd's private directory (root, state, sockets,
	// configs). Keep it short: unix socket paths are limited to 108 bytes.
	Dir   string
	Tools Tools
	// PluginRequestTimeout is NRI's plugin_request_timeout (default 2s).
	PluginRequestTimeout time.Duration
	// RuncBinary, when set, is the runc the CRI runtime runs (its BinaryName),
	// e.g. the seccomp build a kubelet needs; "" = the runc in Tools.RuncDir.
	RuncBinary string
	// PrimaryExtra are plugins appended to containerd's own (primary) chain,
	// found in ExtraCNIBinDirs (e.g. a recording plugin told to fail DEL).
	PrimaryExtra    []map[string]any
	ExtraCNIBinDirs []string
	// ExtraTOML is appended to config.toml as is (whole tables), e.g. NRI's
	// [plugins."io.containerd.nri.v1.nri".default_validator].
	ExtraTOML string
	// DropIns are files copied (under their own names) into Dir/conf.d,
	// which config.toml imports ("conf.d/*.toml", relative to it, as a node
	// set up by `nri-cni node-setup` imports /etc/containerd/conf.d):
	// containerd reads them after config.toml, overriding it key by key
	// (e.g. deploy/node/containerd/10-nri-cni.toml, which sets no socket or
	// timeout, so the private ones stay).
	DropIns []string
}

// Containerd is a containerd started by the harness, with NRI enabled on a
// private socket and its own primary CNI network (a bridge giving eth0 an IP,
// which containerd requires to run a pod sandbox).
type Containerd struct {
	daemon         // Address (gRPC, CRI socket), LogPath, Pid, LogTail, CountLog, WaitLog
	Dir            string
	NRISocket      string
	NRIPluginDir   string // pre-launched plugins: NN-name executables
	NRIConfDir     string // their configs: NN-name.conf
	PrimaryBridge  string
	PrimarySubnet  string
	PrimaryIPAMDir string

	tools   Tools
	started time.Time
}

// RandomName returns prefix + 8 random hex characters.
func RandomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// RandomSubnet returns a random 10.<first..first+9>.<x>.0/24.
func RandomSubnet(first int) string {
	a, _ := rand.Int(rand.Reader, big.NewInt(10))
	b, _ := rand.Int(rand.Reader, big.NewInt(256))
	return fmt.Sprintf("10.%d.%d.0/24", first+int(a.Int64()), b.Int64())
}

// StartContainerd writes the config and primary network and starts
// containerd; it returns once the CRI socket answers.
func StartContainerd(ctx context.Context, o ContainerdOpts) (*Containerd, error) {
	if o.PluginRequestTimeout == 0 {
		o.PluginRequestTimeout = 2 * time.Second
	}
	c := &Containerd{
		daemon: daemon{name: "containerd", Address: filepath.Join(o.Dir, "c.sock"), LogPath: filepath.Join(o.Dir, "containerd.log")},
		Dir:    o.Dir, NRISocket: filepath.Join(o.Dir, "nri.sock"),
		NRIPluginDir: filepath.Join(o.Dir, "nri-plugins"), NRIConfDir: filepath.Join(o.Dir, "nri-conf.d"),
		PrimaryBridge: RandomName("ctdp"),
		PrimarySubnet: RandomSubnet(230), PrimaryIPAMDir: filepath.Join(o.Dir, "ipam"), tools: o.Tools,
	}
	for _, d := range []string{c.NRIPluginDir, c.NRIConfDir, filepath.Join(o.Dir, "net.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	primary, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0", "name": "primary",
		"plugins": append([]map[string]any{
			{"type": "bridge", "bridge": c.PrimaryBridge, "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{"type": "host-local", "subnet": c.PrimarySubnet, "dataDir": c.PrimaryIPAMDir}},
			{"type": "loopback"},
		}, o.PrimaryExtra...),
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(o.Dir, "net.d", "10-primary.conflist"), primary, 0o644); err != nil {
		return nil, err
	}
	if err := writeDropIns(filepath.Join(o.Dir, "conf.d"), o.DropIns); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "config.toml"), []byte(c.config(o)), 0o644); err != nil {
		return nil, err
	}
	c.started = time.Now()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// tomlStrings renders a TOML array of strings.
func tomlStrings(list []string) string {
	quoted := make([]string, len(list))
	for i, s := range list {
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

func (c *Containerd) config(o ContainerdOpts) string {
	return fmt.Sprintf(`version = 3
imports = %[12]s
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %[5]q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = %[6]s
  conf_dir = %[7]q

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %[8]q
  plugin_path = %[9]q
  plugin_config_path = %[10]q
  plugin_registration_timeout = "5s"
  plugin_request_timeout = %[11]q
`, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), c.Address, c.Address+".ttrpc",
		PauseImage, tomlStrings(append([]string{o.Tools.CNIDir}, o.ExtraCNIBinDirs...)), filepath.Join(c.Dir, "net.d"), c.NRISocket, c.NRIPluginDir, c.NRIConfDir,
		o.PluginRequestTimeout.String(), tomlStrings(imports(o.DropIns))) + runcRuntime(o.RuncBinary) + o.ExtraTOML
}

// runcRuntime is the CRI runtime section naming the runc binary (nothing
// when bin is empty: containerd's default runtime, runc found on PATH).
func runcRuntime(bin string) string {
	if bin == "" {
		return ""
	}
	return fmt.Sprintf(`
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  sandboxer = "podsandbox"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = %q
`, bin)
}

func (c *Containerd) start(ctx context.Context) error {
	// runc 1.5.2 first: Debian's runc fails on this kernel.
	env := []string{"PATH=" + c.tools.RuncDir + ":" + c.tools.ContainerdDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return c.daemon.start(ctx, []string{filepath.Join(c.tools.ContainerdDir, "containerd"), "--config", filepath.Join(c.Dir, "config.toml")},
		env, 30*time.Second)
}

// Restart stops containerd (SIGTERM, by pid) and starts it again with the
// same config; pods and their shims keep running, as on a real node.
func (c *Containerd) Restart(ctx context.Context) error {
	c.terminate(10 * time.Second)
	return c.start(ctx)
}

// Close stops and removes every pod, stops containerd, ends the shims it
// left (found by their private address, killed by pid), unmounts whatever
// is mounted under Dir, removes the pods' cgroup parent and deletes the
// primary bridge. It does not remove Dir.
func (c *Containerd) Close(ctx context.Context) error {
	var errs []error
	if cri, err := DialCRI(ctx, c.Address); err == nil {
		if _, err := cri.RemovePods(ctx, nil); err != nil {
			errs = append(errs, err)
		}
		cri.Close()
	}
	c.terminate(10 * time.Second)
	c.killLeftovers()
	if err := UnmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := removePodCgroupParent(c.Address); err != nil {
		errs = append(errs, err)
	}
	_ = exec.Command("ip", "link", "del", c.PrimaryBridge).Run()
	return errors.Join(errs...)
}

// killLeftovers ends what a pod that could not be removed leaves outside
// Dir: runc's state under /run/containerd/runc/k8s.io, the shim's socket
// under /run/containerd/s, and the shim process (found by its command line,
// which names our private address; killed by pid).
func (c *Containerd) killLeftovers() {
	tasks, _ := filepath.Glob(filepath.Join(c.Dir, "state/io.containerd.runtime.v2.task/k8s.io/*/init.pid"))
	for _, p := range tasks {
		id := filepath.Base(filepath.Dir(p))
		_ = exec.Command(filepath.Join(c.tools.RuncDir, "runc"), "--root", "/run/containerd/runc/k8s.io", "delete", "--force", id).Run()
		sum := sha256.Sum256([]byte(filepath.Join(c.Address, "k8s.io", id)))
		_ = os.Remove(filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
	}
	for _, pid := range c.shimPids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	c.removeStaleShimSockets()
}

// removeStaleShimSockets removes shim sockets under /run/containerd/s that
// appeared while this containerd ran and that nothing listens on any more
// (a shim that died during a containerd restart leaves one). A live shim of
// another containerd accepts the connection and is left alone.
func (c *Containerd) removeStaleShimSockets() {
	entries, _ := os.ReadDir("/run/containerd/s")
	for _, e := range entries {
		p := filepath.Join("/run/containerd/s", e.Name())
		info, err := e.Info()
		if err != nil || info.Mode()&os.ModeSocket == 0 || info.ModTime().Before(c.started) {
			continue
		}
		conn, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(p)
		}
	}
}

// shimPids finds containerd-shim-runc-v2 processes started for this
// containerd: their command line names its private address.
func (c *Containerd) shimPids() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.HasSuffix(args[0], "containerd-shim-runc-v2") && strings.Contains(string(cmdline), c.Address) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// PluginSynced is containerd's log line once an NRI plugin is registered
// and synchronized (it then receives pod events).
func PluginSynced(name string) string {
	return fmt.Sprintf(`plugin \"%s\" connected and synchronized`, name)
}

// PrelaunchedSynced is containerd's log line once a plugin it launched from
// its plugin dir is synchronized.
func PrelaunchedSynced(name string) string {
	return fmt.Sprintf(`pre-installed NRI plugin \"%s\" synchronization success`, name)
}

// ConfigFile is containerd's config.toml; the drop-ins it imports are in
// ConfDir.
func (c *Containerd) ConfigFile() string { return filepath.Join(c.Dir, "config.toml") }

// ConfDir holds the drop-ins config.toml imports (ContainerdOpts.DropIns).
func (c *Containerd) ConfDir() string { return filepath.Join(c.Dir, "conf.d") }

// imports is config.toml's imports: the conf.d glob when there are drop-ins.
func imports(dropIns []string) []string {
	if len(dropIns) == 0 {
		return nil
	}
	return []string{"conf.d/*.toml"}
}

// writeDropIns copies each file into dir (created) under its own name.
func writeDropIns(dir string, files []string) error {
	if len(files) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("drop-in: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
