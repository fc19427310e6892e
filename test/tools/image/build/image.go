package build

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one executable placed into the image.
type File struct {
	Path   string // absolute path inside the image
	Source string // file on this machine
}

// ImageConfig is what varies in the image's config.
type ImageConfig struct {
	Version string
	Arch    string
}

// epoch is every timestamp in the image, so equal inputs give equal digests.
var epoch = time.Unix(0, 0).UTC()

// NewImage returns a one-layer scratch image holding files (mode 0755,
// owned by root, parent directories 0755) with nri-cni as its entrypoint.
func NewImage(files []File, c ImageConfig) (v1.Image, error) {
	return Scratch(files, c.Arch, func(cfg *v1.Config) {
		cfg.Entrypoint = []string{BinaryPath}
		cfg.Cmd = append([]string(nil), DefaultCmd...)
		cfg.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		cfg.Labels = map[string]string{
			"org.opencontainers.image.title":       "nri-cni",
			"org.opencontainers.image.description": "Binds CNI networks to pod sandboxes as an NRI plugin",
			"org.opencontainers.image.source":      Source,
			"org.opencontainers.image.version":     c.Version,
		}
	})
}

// Scratch returns a reproducible one-layer linux image of files (mode 0755,
// owned by root, every timestamp the epoch) running as root; edit sets the
// rest of its config (entrypoint, labels…).
func Scratch(files []File, arch string, edit func(*v1.Config)) (v1.Image, error) {
	layerBytes, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	cfg, err := empty.Image.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = arch
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.User = "0:0"
	if edit != nil {
		edit(&cfg.Config)
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(img, layer)
}

// layerTar writes the layer: every parent directory once, then the files,
// in a stable order.
func layerTar(files []File) ([]byte, error) {
	dirs := map[string]bool{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("image path %q: want a clean absolute path", f.Path)
		}
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList) // parents sort before their children
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirList {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755,
			ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, f := range sorted {
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("image file %s: %w", f.Path, err)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: 0o755,
			Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteArchive writes img as a docker-archive tar named tag to out (via a
// temporary file and a rename) and returns the image's digest.
func WriteArchive(img v1.Image, tag, out string) (string, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return "", fmt.Errorf("image tag %q: %w", tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write image archive: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return "", err
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// ReadArchive loads the image tagged tag from a docker-archive tar.
func ReadArchive(archive, tag string) (v1.Image, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return nil, err
	}
	return tarball.ImageFromPath(archive, &ref)
}

// Extract unpacks img's layers into dir (regular files and directories
// only, which is all this image has), like a runtime's rootfs.
func Extract(img v1.Image, dir string) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		err = extractTar(rc, dir)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func extractTar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		rel := path.Clean("/" + hdr.Name)
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, os.FileMode(hdr.Mode).Perm()); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(hdr.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("extract %s: unexpected entry type %q", hdr.Name, hdr.Typeflag)
		}
	}
}
