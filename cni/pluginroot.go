package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/nri-cni/nri-cni/hostroot"
)

// Plugins run against the host (nri.conf pluginRoot).
//
// In nri-cni's container (the DaemonSet) the plugins would otherwise run in
// the image's root: no iptables for bridge's ipMasq or portmap, no dhcp
// daemon socket under /run/cni, none of the host tools third-party plugins
// call. With a plugin root, every plugin process (ADD, DEL, CHECK, STATUS,
// GC, VERSION: all of libcni's execs) is chrooted into it before it starts
// (the kernel's chroot in the child, then chdir "/"), as Multus thick does
// with its chrootDir. Inside, paths mean what they mean on the host: the
// plugin path (binDirs), CNI_PATH and CNI_NETNS are host paths. nri-cni
// itself finds the binaries and the netns paths under the root resolving
// symlinks as the chrooted plugin will, inside the root (hostroot.Path).

// ErrNetnsNotInRoot: a netns path nri-cni sees as a namespace is not the same
// namespace under the plugin root (the host's / mounted without
// HostToContainer propagation, so pins made later are missing there). The
// plugin is not run: a DEL would find no namespace and skip its cleanup.
var ErrNetnsNotInRoot = errors.New("network namespace not visible under pluginRoot")

// textBusyRetries: a plugin binary being replaced (install-plugins) is
// retried, as libcni's RawExec does.
const textBusyRetries = 5

// rootExec is libcni's invoke.Exec for every plugin nri-cni runs, chrooted
// into root when that is on (PluginRootOn). Each plugin runs in a process
// group of its own, and a call cut short (cniTimeout, the runtime's
// deadline) kills the whole group: portmap's and bridge's iptables, a
// plugin's helpers, would otherwise live on past their plugin, holding its
// output pipe open, and change the node after the rollback DEL that was to
// undo them. libcni's own exec kills the plugin alone.
type rootExec struct {
	root   string    // "" : no chroot
	stderr io.Writer // a successful plugin's stderr goes here (libcni: os.Stderr)
	version.PluginDecoder
}

// newRootExec runs plugins in their own process groups, chrooted into root
// unless root is "" or "/".
func newRootExec(root string, stderr io.Writer) *rootExec {
	if !PluginRootOn(root) {
		root = ""
	}
	return &rootExec{root: root, stderr: stderr}
}

// waitDelay bounds how long a plugin's output is waited for once it has
// exited or been killed (a process it started may hold it open).
const waitDelay = 2 * time.Second

// PluginRootOn reports whether plugins run chrooted into root: any root but
// "" and "/" (nri-cni's own).
func PluginRootOn(root string) bool { return hostroot.On(root) }

// FindInPath is libcni's FindInPath with paths inside the root: it returns
// <dir>/<plugin> (the path the chrooted exec runs) for the first dir where
// that is a regular file under root.
func (e *rootExec) FindInPath(plugin string, paths []string) (string, error) {
	if e.root == "" {
		return invoke.FindInPath(plugin, paths)
	}
	switch {
	case plugin == "":
		return "", errors.New("no plugin name provided")
	case strings.ContainsRune(plugin, os.PathSeparator):
		return "", fmt.Errorf("invalid plugin name: %s", plugin)
	case len(paths) == 0:
		return "", errors.New("no paths provided")
	}
	for _, dir := range paths {
		p := filepath.Join(dir, plugin)
		hostPath, err := hostroot.Path(e.root, p)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(hostPath); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("failed to find plugin %q in path %s (under pluginRoot %s)", plugin, paths, e.root)
}

// ExecPlugin runs the plugin at pluginPath (a path inside the root) chrooted
// into the root, with cwd "/" there; without a root, as libcni does.
func (e *rootExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	if err := e.checkNetns(environ); err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	for try := 0; ; try++ {
		stdout.Reset()
		stderr.Reset()
		c := exec.CommandContext(ctx, pluginPath)
		c.Env = environ
		c.Stdin, c.Stdout, c.Stderr = bytes.NewReader(stdin), &stdout, &stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if e.root != "" {
			c.Dir, c.SysProcAttr.Chroot = "/", e.root
		}
		c.Cancel = func() error { return killGroup(c.Process.Pid) }
		c.WaitDelay = waitDelay
		err := c.Run()
		if err == nil || (errors.Is(err, exec.ErrWaitDelay) && ctx.Err() == nil) {
			// ErrWaitDelay alone: the plugin exited 0, and a process it
			// left running (a helper it started) held its output open;
			// what it wrote before exiting is its answer.
			break
		}
		if errors.Is(err, syscall.ETXTBSY) && try < textBusyRetries && ctx.Err() == nil {
			time.Sleep(time.Second)
			continue
		}
		return nil, pluginErr(err, stdout.Bytes(), stderr.Bytes())
	}
	if e.stderr != nil && stderr.Len() > 0 {
		_, _ = stderr.WriteTo(e.stderr)
	}
	return stdout.Bytes(), nil
}

// killGroup kills the process group the plugin pid leads (Setpgid), the
// plugin with every process it started.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// pluginErr is libcni's RawExec error: the plugin's JSON error from stdout,
// else its stderr (libcni and nri-cni read these messages).
func pluginErr(err error, stdout, stderr []byte) error {
	emsg := types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed: %q: %v", string(stderr), err)
	default:
		if perr := json.Unmarshal(stdout, &emsg); perr != nil {
			emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)
		}
	}
	return &emsg
}

// checkNetns: for a call with a netns (ADD, DEL, CHECK), when nri-cni sees
// CNI_NETNS, the path must name the same file under the root. /proc/<pid>/
// paths are left alone: the root's /proc shows nri-cni's PIDs (hostPID,
// which every command with a pluginRoot checks at start: hostroot.CheckPIDs).
func (e *rootExec) checkNetns(environ []string) error {
	if e.root == "" {
		return nil
	}
	var netnsPath string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_NETNS="); ok {
			netnsPath = v
		}
	}
	if !filepath.IsAbs(netnsPath) || strings.HasPrefix(filepath.Clean(netnsPath), "/proc/") {
		return nil // none (a best-effort DEL, VERSION's "dummy"), or the pid's
	}
	var seen unix.Stat_t
	if err := unix.Stat(netnsPath, &seen); err != nil {
		return nil //nolint:nilerr // gone here too: the plugin's DEL handles that
	}
	var in unix.Stat_t
	hostPath, err := hostroot.Path(e.root, netnsPath)
	if err == nil {
		err = unix.Stat(hostPath, &in)
	}
	// The message must not read as "already gone" (IsAlreadyGone).
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s is missing under %s (mount the host's / with mountPropagation HostToContainer)",
			ErrNetnsNotInRoot, netnsPath, e.root)
	case in.Dev != seen.Dev || in.Ino != seen.Ino:
		return fmt.Errorf("%w: %s is another file under %s (mount the host's / with mountPropagation HostToContainer)",
			ErrNetnsNotInRoot, netnsPath, e.root)
	}
	return nil
}
