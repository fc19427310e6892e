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
	for _, pkg := range []string{"./hook", "./cni", "./netns", "./state", "./config", "./metrics"} {
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
