package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

// The data path (event → netns → CNI → state) never imports the Kubernetes
// API client: the attach path cannot call the API server. Only kube/ does.
func TestCorePackagesDoNotImportClientGo(t *testing.T) {
	for _, pkg := range []string{"./cmd/nri-cni", "./hook/nri", "./hook/oci", "./plan", "./attach", "./reconcile", "./cni", "./netns", "./state", "./config", "./metrics", "./nadpolicy", "./migrate", "./deviceinfo"} {
		if dep := firstDep(t, pkg, "k8s.io/client-go"); dep != "" {
			t.Errorf("%s depends on %s: only kube/ may use the API client", pkg, dep)
		}
	}
}

// firstDep is the first of pkg's dependencies (go list -deps) under prefix.
func firstDep(t *testing.T, pkg, prefix string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Dir = harness.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, prefix) {
			return dep
		}
	}
	return ""
}

// The node's binary (nri-cni: NRI plugin and OCI hook) carries no
// Kubernetes API types either: attach and the rules it programs use
// netpol/ir, never netpol, whose policies hold networking/v1's spec (26.0
// MB instead of 19.6 MB when attach imported netpol).
func TestNodeBinaryHasNoKubernetesAPITypes(t *testing.T) {
	for _, pkg := range []string{"./cmd/nri-cni", "./attach", "./netpol/ir", "./nft"} {
		if dep := firstDep(t, pkg, "k8s.io/api/"); dep != "" {
			t.Errorf("%s depends on %s: Kubernetes API types stay out of the node's binary", pkg, dep)
		}
	}
}

// The binaries link no text/template or html/template: their reflective
// method calls make the linker keep every exported method of every type
// (33 MB grew to 61 MB when a template crept in; 65 MB when gRPC's
// x/net/trace did, which the grpcnotrace tag of the Makefile and the image
// build keeps out).
func TestBinariesLinkNoTemplates(t *testing.T) {
	for _, pkg := range []string{"./cmd/nri-cni", "./cmd/nri-cni-k8s"} {
		cmd := exec.Command("go", "list", "-deps", "-tags", build.BuildTags, pkg)
		cmd.Dir = harness.RepoRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == "text/template" || dep == "html/template" {
				t.Errorf("%s depends on %s: render with strings instead (or find the build tag that drops it)", pkg, dep)
			}
		}
	}
}

// The Makefile builds with the tags the image build uses.
func TestMakefileBuildTags(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\nTAGS    := "+build.BuildTags+"\n") {
		t.Errorf("Makefile: want TAGS := %s (test/tools/image/build.BuildTags)", build.BuildTags)
	}
}
