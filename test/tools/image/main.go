// Command image builds nri-cni's container image as a docker-archive tar
// (`make image`):
//
//	go run ./test/tools/image -out bin/nri-cni-image.tar -tag localhost/nri-cni:dev [-version V]
//
// It builds bin/nri-cni-k8s and bin/nri-cni-hook (./cmd/nri-cni), both
// static, takes the pinned CNI plugins from test/tools/install.sh cni, and
// writes a scratch-based image with /usr/local/bin/nri-cni-k8s,
// /usr/local/bin/nri-cni and /opt/nri-cni/cni-bin/<plugin>. Load it with
// `kind load image-archive FILE` or `ctr -n k8s.io images import FILE`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

func main() {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("out", build.DefaultOut, "docker-archive tar to write")
	tag := fs.String("tag", build.DefaultTag, "image reference")
	version := fs.String("version", "dev", "version compiled into nri-cni and set as the image's version label")
	binOut := fs.String("bin", "bin/nri-cni-k8s", "where to build the nri-cni-k8s binary (nri-cni with Kubernetes mode)")
	cniDir := fs.String("cni-dir", "", "CNI plugin directory (default: the pinned plugins from test/tools/install.sh cni)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected arguments %q\n", fs.Args())
		os.Exit(2)
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := build.Build(ctx, build.Options{
		RepoRoot: root, Out: abs(*out), Tag: *tag, Version: *version, BinOut: abs(*binOut), CNIDir: *cniDir,
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "image: "+format+"\n", args...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s\n", res.Out, res.Tag, res.Digest)
}

// moduleRoot walks up from the working directory to the dir with go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
