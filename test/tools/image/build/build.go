// Package build assembles nri-cni's container image: a scratch-based image
// holding the static nri-cni-k8s binary (nri-cni with Kubernetes mode) and the CNI plugins the DaemonSet's init
// container installs on the node. It writes a docker-archive tar that
// `ctr images import` and `kind load image-archive` accept. It is shared by
// `make image` (test/tools/image) and the e2e tests, so both take one path.
package build

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Paths and names inside the image. The DaemonSet (deploy/base) relies on
// them; test/deploy checks that it does.
const (
	// BinaryPath is nri-cni-k8s (nri-cni with Kubernetes mode) inside the
	// image (entrypoint and liveness probe).
	BinaryPath = "/usr/local/bin/nri-cni-k8s"
	// HookBinaryPath is nri-cni (the node's binary: no API client, starts in
	// a few milliseconds) inside the image: the DaemonSet's install-hook
	// init container copies it to the node, where the runtime runs it as
	// the await hook (`nri-cni await`) of containers whose pod is still
	// being attached.
	HookBinaryPath = "/usr/local/bin/nri-cni"
	// PluginDir holds the CNI plugins shipped for `nri-cni install-plugins`.
	PluginDir = "/opt/nri-cni/cni-bin"
	// DefaultTag is the reference deploy/base/daemonset.yaml uses.
	DefaultTag = "localhost/nri-cni:dev"
	// DefaultOut is where `make image` writes the archive.
	DefaultOut = "bin/nri-cni-image.tar"
	// Source is the image's org.opencontainers.image.source label.
	Source = "https://github.com/nri-cni/nri-cni"
)

// Plugins are the CNI plugins shipped in PluginDir, from the pinned
// reference plugins (test/tools/install.sh cni).
var Plugins = []string{"bridge", "host-local", "loopback", "tuning", "bandwidth", "portmap"}

// DefaultCmd is the image's Cmd: the external plugin with the config path
// the DaemonSet mounts.
var DefaultCmd = []string{"run", "--config", "/etc/nri-cni/nri.conf"}

// Options says what to build and where.
type Options struct {
	// RepoRoot is the module root (where go build runs). Required.
	RepoRoot string
	// Out is the docker-archive tar to write (parent dirs are created).
	Out string
	// Tag is the image reference written into the archive.
	Tag string
	// Version goes into -X …/cmd/internal/cli.version and the version label ("dev" if empty).
	Version string
	// BinOut is where nri-cni-k8s is built (default <RepoRoot>/bin/nri-cni-k8s).
	BinOut string
	// CNIDir holds the plugin binaries; empty: run test/tools/install.sh cni
	// and use the CNI_BIN_DIR it prints.
	CNIDir string
	// Arch is the image architecture and GOARCH (default runtime.GOARCH).
	Arch string
	// Log receives progress lines (nil: none).
	Log func(format string, args ...any)
}

// Result describes what Build wrote.
type Result struct {
	Out     string // the archive
	Tag     string
	Binary  string // the nri-cni binary that went into the image
	CNIDir  string // where the plugins came from
	Digest  string // image manifest digest (sha256:…)
	Version string
}

// Build compiles nri-cni (static, trimmed, stripped), collects the CNI
// plugins and writes the image archive atomically.
func Build(ctx context.Context, o Options) (Result, error) {
	if o.RepoRoot == "" || o.Out == "" {
		return Result{}, fmt.Errorf("image build: RepoRoot and Out are required")
	}
	if o.Tag == "" {
		o.Tag = DefaultTag
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.BinOut == "" {
		o.BinOut = filepath.Join(o.RepoRoot, "bin", "nri-cni-k8s")
	}
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if o.CNIDir == "" {
		dir, err := InstallCNI(ctx, o.RepoRoot)
		if err != nil {
			return Result{}, err
		}
		o.CNIDir = dir
	}
	logf("building %s (version %s, %s)", o.BinOut, o.Version, o.Arch)
	if err := GoBuild(ctx, o.RepoRoot, o.BinOut, o.Version, o.Arch); err != nil {
		return Result{}, err
	}
	hookBin := filepath.Join(filepath.Dir(o.BinOut), "nri-cni-hook")
	if err := goBuild(ctx, o.RepoRoot, hookBin, o.Version, o.Arch, "./cmd/nri-cni"); err != nil {
		return Result{}, err
	}
	files := []File{{Path: BinaryPath, Source: o.BinOut}, {Path: HookBinaryPath, Source: hookBin}}
	for _, p := range Plugins {
		files = append(files, File{Path: PluginDir + "/" + p, Source: filepath.Join(o.CNIDir, p)})
	}
	img, err := NewImage(files, ImageConfig{Version: o.Version, Arch: o.Arch})
	if err != nil {
		return Result{}, err
	}
	digest, err := WriteArchive(img, o.Tag, o.Out)
	if err != nil {
		return Result{}, err
	}
	logf("wrote %s (%s, %s)", o.Out, o.Tag, digest)
	return Result{Out: o.Out, Tag: o.Tag, Binary: o.BinOut, CNIDir: o.CNIDir, Digest: digest, Version: o.Version}, nil
}

// BuildTags are the main Makefile's TAGS.
const BuildTags = "grpcnotrace"

// GoBuild builds ./cmd/nri-cni-k8s the way the main Makefile's build target
// does: CGO_ENABLED=0, -trimpath, -tags BuildTags, -ldflags "-s -w -X
// …/cmd/internal/cli.version=…".
func GoBuild(ctx context.Context, repoRoot, out, version, arch string) error {
	return goBuild(ctx, repoRoot, out, version, arch, "./cmd/nri-cni-k8s")
}

// goBuild builds pkg as GoBuild does.
func goBuild(ctx context.Context, repoRoot, out, version, arch, pkg string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags", BuildTags,
		"-ldflags", "-s -w -X github.com/nri-cni/nri-cni/cmd/internal/cli.version="+version, "-o", out, pkg)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// InstallCNI runs `test/tools/install.sh cni` (idempotent, cached) and
// returns the CNI_BIN_DIR it prints.
func InstallCNI(ctx context.Context, repoRoot string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, "test/tools/install.sh"), "cni")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("test/tools/install.sh cni: %w\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if dir, ok := strings.CutPrefix(sc.Text(), "CNI_BIN_DIR="); ok && dir != "" {
			return dir, nil
		}
	}
	return "", fmt.Errorf("test/tools/install.sh cni printed no CNI_BIN_DIR line: %q", out)
}
