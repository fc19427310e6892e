package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := newPauseImage(data)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(PauseImage)
	if err != nil {
		return err
	}
	// Write next to the target and rename, so a half-written tar is never
	// mistaken for a fresh cache entry.
	if err := os.MkdirAll(filepath.Dir(outTar), 0o755); err != nil {
		return err
	}
	tmp := outTar + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write image tar: %w", err)
	}
	return os.Rename(tmp, outTar)
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

// newPauseImage assembles an image whose only layer holds /pause.
func newPauseImage(bin []byte) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "pause",
		Mode:     0o755,
		Size:     int64(len(bin)),
		Uid:      0,
		Gid:      0,
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("pause layer: %w", err)
	}

	cfg, err := empty.Image.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = []string{"/pause"}
	cfg.Config.User = "0:0"
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(img, layer)
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
