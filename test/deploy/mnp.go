package deploy

import (
	"fmt"
	"path/filepath"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// MultiNetworkPolicy's deployment: the CRD (its own kustomization, never
// part of the component) and the component deploy/multinetworkpolicy.
const (
	MNPCRDDir  = "deploy/crds/multinetworkpolicy"
	MNPCRDFile = "multi-networkpolicies.yaml"
	MNPDir     = "deploy/multinetworkpolicy"
	// MNPPolicyName names the admission policy, its binding, the
	// ClusterRole and its binding.
	MNPPolicyName = "nri-cni-multinetworkpolicy"
	// ChartMNPCRD is the chart's copy of the CRD (crds/), relative to the
	// module root.
	ChartMNPCRD = "deploy/helm/nri-cni/crds/" + MNPCRDFile
)

// LoadMNPCRD decodes deploy/crds/multinetworkpolicy's CRD strictly.
func LoadMNPCRD(repoRoot string) (*CRD, error) {
	var crd CRD
	if err := DecodeStrict(filepath.Join(repoRoot, MNPCRDDir, MNPCRDFile), &crd); err != nil {
		return nil, err
	}
	return &crd, nil
}

// MNP is deploy/multinetworkpolicy, decoded strictly: its RBAC, its
// admission policy and binding, and its nri.conf patch (a JSON patch of one
// operation replacing the ConfigMap's nri.conf).
type MNP struct {
	Dir                string
	Kustomization      MNPComponent
	ClusterRole        rbacv1.ClusterRole
	ClusterRoleBinding rbacv1.ClusterRoleBinding
	Policy             admissionv1.ValidatingAdmissionPolicy
	PolicyBinding      admissionv1.ValidatingAdmissionPolicyBinding
	ConfigPatch        []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value string `json:"value"`
	}
}

// MNPComponent is the component's kustomization (kind Component).
type MNPComponent struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path   string `json:"path"`
		Target struct {
			Version string `json:"version,omitempty"`
			Kind    string `json:"kind"`
			Name    string `json:"name"`
		} `json:"target"`
	} `json:"patches"`
}

// LoadMNP decodes deploy/multinetworkpolicy.
func LoadMNP(repoRoot string) (*MNP, error) {
	m := &MNP{Dir: filepath.Join(repoRoot, MNPDir)}
	if err := DecodeStrict(filepath.Join(m.Dir, "kustomization.yaml"), &m.Kustomization); err != nil {
		return nil, err
	}
	for file, dst := range map[string][]any{
		"rbac.yaml":   {&m.ClusterRole, &m.ClusterRoleBinding},
		"policy.yaml": {&m.Policy, &m.PolicyBinding},
	} {
		if err := DecodeDocuments(filepath.Join(m.Dir, file), dst...); err != nil {
			return nil, err
		}
	}
	if len(m.Kustomization.Patches) != 1 {
		return nil, fmt.Errorf("%s: %d patches, want the nri.conf one", m.Dir, len(m.Kustomization.Patches))
	}
	if err := DecodeStrict(filepath.Join(m.Dir, m.Kustomization.Patches[0].Path), &m.ConfigPatch); err != nil {
		return nil, err
	}
	return m, nil
}
