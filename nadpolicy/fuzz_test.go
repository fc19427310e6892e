package nadpolicy_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/nadpolicy/policytest"
)

// FuzzCheck: any spec.config gets a verdict without panicking, the same
// every time; a refusal is a *Violation naming a policy key; what is
// allowed is empty or a JSON object without backslashes.
func FuzzCheck(f *testing.F) {
	for _, c := range policytest.Cases() {
		f.Add(c.Namespace, c.Config)
	}
	p, err := nadpolicy.New(policytest.Policy(policytest.Telco))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ns, cfg string) {
		err := p.Check(ns, []byte(cfg))
		if again := p.Check(ns, []byte(cfg)); (err == nil) != (again == nil) || (err != nil && err.Error() != again.Error()) {
			t.Fatalf("two verdicts: %v / %v", err, again)
		}
		if err != nil {
			var v *nadpolicy.Violation
			if !errors.As(err, &v) || !strings.HasPrefix(v.PolicyKey, "kubernetes.nadPolicy") {
				t.Fatalf("refusal %v is not a Violation with a policy key", err)
			}
			return
		}
		if strings.TrimSpace(cfg) == "" {
			return
		}
		var obj map[string]any
		if strings.Contains(cfg, `\`) || json.Unmarshal([]byte(cfg), &obj) != nil {
			t.Fatalf("allowed %q, which is not a JSON object without escapes", cfg)
		}
	})
}
