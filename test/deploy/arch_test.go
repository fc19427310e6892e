package deploy_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/test/harness"
)

// The data path (event → netns → CNI → state) never imports the Kubernetes
// API client: the attach path cannot call the API server. Only kube/ does.
func TestCorePackagesDoNotImportClientGo(t *testing.T) {
	for _, pkg := range []string{"./cmd/nri-cni", "./nriplugin", "./ocihook", "./plan", "./attach", "./reconcile", "./cni", "./netns", "./state", "./config", "./metrics", "./nadpolicy"} {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = harness.RepoRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "k8s.io/client-go") {
				t.Errorf("%s depends on %s: only kube/ may use the API client", pkg, dep)
				break
			}
		}
	}
}

// The binary links no text/template or html/template: their reflective
// method calls make the linker keep every exported method of every type
// (33 MB grew to 61 MB when a template crept in).
func TestBinaryLinksNoTemplates(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/nri-cni")
	cmd.Dir = harness.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/nri-cni: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "text/template" || dep == "html/template" {
			t.Errorf("./cmd/nri-cni depends on %s: render with strings instead", dep)
		}
	}
}
