// Package harness runs the real parts nri-cni is tested against: the pinned
// tools, a private containerd with NRI, the offline pause image, a CRI
// client and nri-cni processes. It is shared by the e2e tests and `make demo`,
// so it does not import "testing".
package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// Tools are the directories of the pinned binaries.
type Tools struct {
	CNIDir        string // bridge, host-local, loopback, portmap, tuning, bandwidth, dhcp, firewall
	ContainerdDir string // containerd, containerd-shim-runc-v2, ctr
	RuncDir       string // runc
	CRIODir       string // crio, pinns, conmon (install-crio.sh); "" from EnsureContainerdTools
}

// Versions names the tools by their cache dirs' names, which carry the
// versions ("containerd-v2.4.2, runc-v1.5.2, cni-plugins-v1.9.1").
func (t Tools) Versions() string {
	var names []string
	for _, d := range []string{t.ContainerdDir, t.RuncDir, t.CNIDir, t.CRIODir} {
		if d != "" {
			names = append(names, filepath.Base(d))
		}
	}
	return strings.Join(names, ", ")
}

// RepoRoot returns the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// installed is one install.sh run, done once per process.
type installed struct {
	once  sync.Once
	tools Tools
	err   error
}

var containerdTools, allTools installed

// EnsureContainerdTools installs what a private containerd needs — the CNI
// plugins, containerd, runc and the Debian packages the harness uses
// (test/tools/install.sh apt cni runtime; idempotent, cached under
// ~/.cache/nri-cni/tools keyed by version) — once per process. CRIODir is
// empty: callers that start CRI-O use EnsureTools.
func EnsureContainerdTools() (Tools, error) {
	return containerdTools.install("apt", "cni", "runtime")
}

// EnsureTools is EnsureContainerdTools plus CRI-O (install.sh … crio; a
// cold CRI-O build takes minutes): everything the harness can start.
func EnsureTools() (Tools, error) {
	return allTools.install("apt", "cni", "runtime", "crio")
}

// install runs install.sh with the components once. Its progress lines (one
// per component built, none for a cached one: INSTALL_QUIET) go to stderr as
// they come; on failure the script prints the end of the build's log there.
func (in *installed) install(components ...string) (Tools, error) {
	in.once.Do(func() {
		cmd := exec.Command("bash", append([]string{filepath.Join(RepoRoot(), "test/tools/install.sh")}, components...)...)
		cmd.Env = append(cmd.Environ(), "INSTALL_QUIET=1")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			in.err = fmt.Errorf("test/tools/install.sh %s: %w (its output is above)", strings.Join(components, " "), err)
			return
		}
		env := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				env[k] = v
			}
		}
		in.tools = Tools{CNIDir: env["CNI_BIN_DIR"], ContainerdDir: env["CONTAINERD_BIN_DIR"], RuncDir: env["RUNC_BIN_DIR"],
			CRIODir: env["CRIO_BIN_DIR"]}
		if in.tools.CNIDir == "" || in.tools.ContainerdDir == "" || in.tools.RuncDir == "" ||
			(slices.Contains(components, "crio") && in.tools.CRIODir == "") {
			in.err = fmt.Errorf("test/tools/install.sh %s printed no tool dirs: %q", strings.Join(components, " "), out)
		}
	})
	return in.tools, in.err
}

// GoBuild builds pkg (relative to the repo root) into dir/name, static.
// Built as the installers and test/tools/gobuild.sh build (CGO_ENABLED=0,
// no -trimpath), so that a cold first run compiles the shared dependencies
// once.
func GoBuild(dir, pkg, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}
