package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// NoMAPDir is deploy/base-1.34-nomap, relative to the repo: deploy/base for
// clusters without MutatingAdmissionPolicy (Kubernetes 1.34 and 1.35 without
// its feature gate).
const NoMAPDir = "deploy/base-1.34-nomap"

// NoMAP is deploy/base-1.34-nomap, decoded: its kustomization and the two
// ValidatingAdmissionPolicies (with their bindings) that take the place of
// deploy/base's MutatingAdmissionPolicies.
type NoMAP struct {
	Dir           string
	Kustomization Kustomization
	// Required refuses pods that ask for networks without requiring nri-cni
	// (required-plugins-validation.yaml).
	Required        admissionv1.ValidatingAdmissionPolicy
	RequiredBinding admissionv1.ValidatingAdmissionPolicyBinding
	// Claims refuses claims and templates of nri-cni's classes without the
	// namespace selector (dra-claim-validation.yaml).
	Claims        admissionv1.ValidatingAdmissionPolicy
	ClaimsBinding admissionv1.ValidatingAdmissionPolicyBinding
}

// Files of deploy/base-1.34-nomap besides its kustomization.
const (
	NoMAPRequiredFile = "required-plugins-validation.yaml"
	NoMAPClaimsFile   = "dra-claim-validation.yaml"
)

// LoadNoMAP decodes deploy/base-1.34-nomap strictly: each of its two files
// is one policy and its binding.
func LoadNoMAP(repoRoot string) (*NoMAP, error) {
	n := &NoMAP{Dir: filepath.Join(repoRoot, NoMAPDir)}
	if err := DecodeStrict(filepath.Join(n.Dir, "kustomization.yaml"), &n.Kustomization); err != nil {
		return nil, err
	}
	for file, dst := range map[string][]any{
		NoMAPRequiredFile: {&n.Required, &n.RequiredBinding},
		NoMAPClaimsFile:   {&n.Claims, &n.ClaimsBinding},
	} {
		if err := DecodeDocuments(filepath.Join(n.Dir, file), dst...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// DecodeDocuments decodes the documents of the YAML file at path strictly,
// one into each of dst, in order; a different number of documents is an
// error.
func DecodeDocuments(path string, dst ...any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs, err := documents(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(docs) != len(dst) {
		return fmt.Errorf("%s: %d documents, want %d", path, len(docs), len(dst))
	}
	for i, doc := range docs {
		if err := DecodeStrictBytes(doc, dst[i]); err != nil {
			return fmt.Errorf("%s: document %d: %w", path, i, err)
		}
	}
	return nil
}

// documents splits a YAML stream into its documents that are not only
// comments.
func documents(data []byte) ([][]byte, error) {
	var out [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			out = append(out, doc)
		}
	}
}

// Variable is the expression of the policy variable name ("" if none).
func Variable(vars []admissionv1.Variable, name string) string {
	for _, v := range vars {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}
