package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

// PauseImage is the reference under which the offline pause image is
// imported; point containerd's pinned sandbox image at it.
const PauseImage = "localhost/pause:local"

// pauseSrcDir is the pause program's package, relative to the repo root.
const pauseSrcDir = "test/tools/pause"

// BuildPauseImageTar builds the static pause binary into workDir and writes a
// docker-archive tar of a one-layer image named PauseImage to outTar. If
// outTar already exists and is newer than the pause source, it is reused.
func BuildPauseImageTar(ctx context.Context, workDir, outTar string) error {
	root := RepoRoot()
	if pauseTarFresh(outTar, filepath.Join(root, pauseSrcDir, "main.go")) {
		return nil
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(workDir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w", "-o", bin, "./"+pauseSrcDir)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./%s: %w\n%s", pauseSrcDir, err, out)
	}
	img, err := build.Scratch([]build.File{{Path: "/pause", Source: bin}}, runtime.GOARCH, func(c *v1.Config) {
		c.Entrypoint = []string{"/pause"}
	})
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	// Written next to the target and renamed, so a half-written tar is never
	// mistaken for a fresh cache entry.
	_, err = build.WriteArchive(img, PauseImage, outTar)
	return err
}

// pauseTarFresh reports whether target exists and is newer than source.
func pauseTarFresh(target, source string) bool {
	t, err := os.Stat(target)
	if err != nil {
		return false
	}
	s, err := os.Stat(source)
	if err != nil {
		return false
	}
	return t.ModTime().After(s.ModTime())
}

// ImportImage imports an image tar into containerd's k8s.io namespace (the
// one the CRI plugin uses) with `ctr images import --local`.
func ImportImage(ctx context.Context, ctrBin, address, tarPath string) error {
	cmd := exec.CommandContext(ctx, ctrBin, "--address", address,
		"-n", "k8s.io", "images", "import", "--local", tarPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s images import %s: %w\n%s", ctrBin, tarPath, err, out)
	}
	return nil
}
