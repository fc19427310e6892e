package build

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// fakeFiles writes small stand-ins for nri-cni and the plugins.
func fakeFiles(t *testing.T) []File {
	t.Helper()
	dir := t.TempDir()
	files := []File{{Path: BinaryPath, Source: filepath.Join(dir, "nri-cni")}}
	for _, p := range Plugins {
		files = append(files, File{Path: PluginDir + "/" + p, Source: filepath.Join(dir, p)})
	}
	for _, f := range files {
		if err := os.WriteFile(f.Source, []byte("#!fake "+f.Path), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

func TestImageRoundTrip(t *testing.T) {
	files := fakeFiles(t)
	img, err := NewImage(files, ImageConfig{Version: "v9.9.9", Arch: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sub", "img.tar")
	digest, err := WriteArchive(img, DefaultTag, out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
	back, err := ReadArchive(out, DefaultTag)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := back.Digest(); d.String() != digest {
		t.Errorf("digest after reading back %s, want %s", d, digest)
	}
	cfg, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "arm64" {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != BinaryPath {
		t.Errorf("entrypoint %q", got)
	}
	if got := cfg.Config.Cmd; len(got) != 3 || got[0] != "run" || got[1] != "--config" || got[2] != "/etc/nri-cni/nri.conf" {
		t.Errorf("cmd %q", got)
	}
	for k, want := range map[string]string{"org.opencontainers.image.title": "nri-cni",
		"org.opencontainers.image.source": Source, "org.opencontainers.image.version": "v9.9.9"} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	// The layer: parents before children, everything root-owned, 0755.
	layers, err := back.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seen := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if parent := filepath.Dir(filepath.Clean(h.Name)); parent != "." && !seen[parent] {
			t.Errorf("%s comes before its directory %s", h.Name, parent)
		}
		seen[filepath.Clean(h.Name)] = true
		if h.Uid != 0 || h.Gid != 0 || h.Mode != 0o755 {
			t.Errorf("%s: uid %d gid %d mode %o", h.Name, h.Uid, h.Gid, h.Mode)
		}
	}
	for _, f := range files {
		if !seen[f.Path[1:]] {
			t.Errorf("%s missing from the layer", f.Path)
		}
	}

	// Extract gives the rootfs a runtime would.
	root := t.TempDir()
	if err := Extract(back, root); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(root, BinaryPath))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("extracted %s: %v %v", BinaryPath, st, err)
	}
}

func TestImageIsReproducible(t *testing.T) {
	files := fakeFiles(t)
	var digests []string
	for i := 0; i < 2; i++ {
		img, err := NewImage(files, ImageConfig{Version: "dev", Arch: "amd64"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
	}
	if digests[0] != digests[1] {
		t.Errorf("same inputs, different digests: %v", digests)
	}
}

func TestImageRefusesRelativePaths(t *testing.T) {
	if _, err := NewImage([]File{{Path: "usr/bin/x", Source: "/dev/null"}}, ImageConfig{}); err == nil {
		t.Error("relative path accepted")
	}
}
