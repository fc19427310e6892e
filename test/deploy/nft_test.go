package deploy_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/test/harness"
)

// Only package nft talks nftables (docs/architecture.md): one place
// programs pods' tables, and it refuses the host's netns.
func TestOnlyNftImportsNftables(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = harness.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			if (imp == "github.com/google/nftables" || strings.HasPrefix(imp, "github.com/google/nftables/") ||
				imp == "sigs.k8s.io/knftables") && fields[0] != module+"nft" {
				t.Errorf("%s imports %s: only package nft may (docs/architecture.md)", fields[0], imp)
			}
		}
	}
}
