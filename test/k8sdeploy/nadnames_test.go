package k8sdeploy

import (
	"testing"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
)

// The tests' NAD bridges and subnets pass deploy/base's NAD policy.
func TestNADNamesPassTheShippedPolicy(t *testing.T) {
	b, err := deploy.LoadBase(harness.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(b.ConfigMap.Data[deploy.ConfigKey]))
	if err != nil {
		t.Fatal(err)
	}
	p, err := nadpolicy.New(cfg.Kubernetes.NADPolicyOrDefault())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		conf := `{"cniVersion":"1.0.0","name":"t","plugins":[{"type":"bridge","bridge":"` + NADBridge() +
			`","isGateway":false,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"` + NADSubnet() + `"}]]}}]}`
		if err := p.Check("default", []byte(conf)); err != nil {
			t.Fatalf("%s: %v", conf, err)
		}
	}
}
