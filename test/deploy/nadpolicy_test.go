package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	admissionv1 "k8s.io/api/admissionregistration/v1"
)

// deploy/base's NAD admission policy binding warns (and audits) in every
// namespace: applying deploy/base refuses no NAD, so it cannot break the
// NADs Multus serves on a cluster that runs it (docs/kubernetes.md: from
// warn to deny). The file says so where an admin reads it.
func TestNADPolicyBindingWarnsEverywhere(t *testing.T) {
	b := loadBase(t)
	assert.Equal(t, b.NADPolicy.Name, b.NADPolicyBinding.Spec.PolicyName)
	assert.Equal(t, []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}, b.NADPolicyBinding.Spec.ValidationActions)
	assert.Nil(t, b.NADPolicyBinding.Spec.MatchResources, "every namespace, every NAD")
	raw, err := os.ReadFile(filepath.Join(b.Dir, "nad-policy.yaml"))
	assert.NoError(t, err)
	_, binding, _ := strings.Cut(string(raw), "\n---\n")
	assert.True(t, strings.HasPrefix(binding, "# Mode warn (nri-cni nad-policy --mode)"), binding)
}
