package nadpolicy_test

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
)

// TestShippedAdmissionPolicyIsGenerated: deploy/base/nad-policy.yaml and
// the chart's files/nad-policy.yaml are what the generator makes of
// deploy/base/configmap.yaml's nri.conf, so nobody edits one and forgets
// the other. (test/kubeapi's TestHelmTemplateMatchesBase checks that the
// chart's nri.conf is deploy/base's.)
func TestShippedAdmissionPolicyIsGenerated(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "deploy")
	data, err := os.ReadFile(filepath.Join(root, "base", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(cm.Data["nri.conf"]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kubernetes == nil || cfg.Kubernetes.NADPolicy == nil {
		t.Fatal("deploy/base's nri.conf has no kubernetes.nadPolicy")
	}
	want, err := nadpolicy.AdmissionPolicy(cfg.Kubernetes.NADPolicyOrDefault(), cfg.Kubernetes.NADConfigLimit())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"deploy/base/nad-policy.yaml", "deploy/helm/nri-cni/files/nad-policy.yaml"} {
		got, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is not what the generator makes of deploy/base/configmap.yaml's kubernetes.nadPolicy: regenerate it\n"+
				"  go run ./cmd/nri-cni nad-policy --configmap deploy/base/configmap.yaml > %s", f, f)
		}
	}
	// The shipped default allows the bridges and the range it documents.
	p, err := nadpolicy.New(cfg.Kubernetes.NADPolicyOrDefault())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check("team-a", []byte(`{"cniVersion":"1.0.0","name":"t","plugins":[{"type":"bridge","bridge":"nad-team-a",`+
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.251.3.0/24"}]]}},{"type":"tuning","capabilities":{"mac":true}}]}`)); err != nil {
		t.Errorf("the shipped policy refuses a nad-* bridge in its range: %v", err)
	}
}
