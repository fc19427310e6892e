// Package harness runs the real parts nri-cni is tested against: the pinned
// tools, a private containerd with NRI, the offline pause image, a CRI
// client and nri-cni processes. It is shared by the e2e tests and `make demo`,
// so it does not import "testing".
package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Tools are the directories of the pinned binaries.
type Tools struct {
	CNIDir        string // bridge, host-local, loopback, portmap, tuning, bandwidth
	ContainerdDir string // containerd, containerd-shim-runc-v2, ctr
	RuncDir       string // runc
	CRIODir       string // crio, pinns, conmon (install-crio.sh)
}

// RepoRoot returns the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	toolsOnce sync.Once
	tools     Tools
	toolsErr  error
)

// EnsureTools runs test/tools/install.sh all (CNI plugins, containerd, runc,
// CRI-O; idempotent; cached under ~/.cache/nri-cni/tools, keyed by version)
// once per process.
func EnsureTools() (Tools, error) {
	toolsOnce.Do(func() {
		cmd := exec.Command("bash", filepath.Join(RepoRoot(), "test/tools/install.sh"), "all")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			toolsErr = fmt.Errorf("test/tools/install.sh: %w\n%s", err, stderr.String())
			return
		}
		env := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				env[k] = v
			}
		}
		tools = Tools{CNIDir: env["CNI_BIN_DIR"], ContainerdDir: env["CONTAINERD_BIN_DIR"], RuncDir: env["RUNC_BIN_DIR"],
			CRIODir: env["CRIO_BIN_DIR"]}
		if tools.CNIDir == "" || tools.ContainerdDir == "" || tools.RuncDir == "" || tools.CRIODir == "" {
			toolsErr = fmt.Errorf("test/tools/install.sh printed no tool dirs: %q", out)
		}
	})
	return tools, toolsErr
}

// GoBuild builds pkg (relative to the repo root) into dir/name.
func GoBuild(dir, pkg, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}
