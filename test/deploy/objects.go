package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Objects are the objects nri-cni's deployment ships (deploy/base, and the
// Helm chart's rendered templates), one of each kind.
type Objects struct {
	DaemonSet          appsv1.DaemonSet
	ConfigMap          corev1.ConfigMap
	ServiceAccount     corev1.ServiceAccount
	ClusterRole        rbacv1.ClusterRole
	ClusterRoleBinding rbacv1.ClusterRoleBinding
	CRD                CRD
	Policy             admissionv1.ValidatingAdmissionPolicy
	PolicyBinding      admissionv1.ValidatingAdmissionPolicyBinding

	seen map[string]bool // kinds decoded
}

// Kinds are the kinds Objects holds, sorted.
func Kinds() []string {
	var o Objects
	var kinds []string
	for k := range o.targets() {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

func (o *Objects) targets() map[string]any {
	return map[string]any{
		"DaemonSet": &o.DaemonSet, "ConfigMap": &o.ConfigMap, "ServiceAccount": &o.ServiceAccount,
		"ClusterRole": &o.ClusterRole, "ClusterRoleBinding": &o.ClusterRoleBinding,
		"CustomResourceDefinition": &o.CRD, "ValidatingAdmissionPolicy": &o.Policy,
		"ValidatingAdmissionPolicyBinding": &o.PolicyBinding,
	}
}

// Decode decodes every document of a YAML stream (source names it in
// errors) strictly into o: unknown fields, duplicate keys, kinds Objects
// does not hold and a kind seen twice are errors. Empty documents (a Helm
// template that rendered nothing) are skipped.
func (o *Objects) Decode(source string, data []byte) error {
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	targets := o.targets()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		if tm.Kind == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		target, ok := targets[tm.Kind]
		if !ok {
			return fmt.Errorf("%s: document %d: unexpected kind %q", source, i, tm.Kind)
		}
		if o.seen[tm.Kind] {
			return fmt.Errorf("%s: document %d: a second %s", source, i, tm.Kind)
		}
		o.seen[tm.Kind] = true
		if err := DecodeStrictBytes(doc, target); err != nil {
			return fmt.Errorf("%s: document %d (%s): %w", source, i, tm.Kind, err)
		}
	}
}

// Missing lists the kinds not decoded yet.
func (o *Objects) Missing() []string {
	var missing []string
	for _, k := range Kinds() {
		if !o.seen[k] {
			missing = append(missing, k)
		}
	}
	return missing
}

func stripComments(doc []byte) []byte {
	var out []string
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

// DecodeStrictBytes decodes one YAML (or JSON) document into v: unknown
// fields and duplicate keys are errors.
func DecodeStrictBytes(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// CRD is the part of apiextensions.k8s.io/v1 CustomResourceDefinition that
// deploy/base's CRD uses, strictly (k8s.io/apiextensions-apiserver is not a
// dependency of this module; the API server validates the whole object when
// test/kubeapi applies it).
type CRD struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CRDSpec `json:"spec"`
}

// CRDSpec is the CRD's spec.
type CRDSpec struct {
	Group    string       `json:"group"`
	Scope    string       `json:"scope"`
	Names    CRDNames     `json:"names"`
	Versions []CRDVersion `json:"versions"`
}

// CRDNames is spec.names.
type CRDNames struct {
	Plural     string   `json:"plural"`
	Singular   string   `json:"singular,omitempty"`
	Kind       string   `json:"kind"`
	ListKind   string   `json:"listKind,omitempty"`
	ShortNames []string `json:"shortNames,omitempty"`
}

// CRDVersion is one of spec.versions.
type CRDVersion struct {
	Name    string `json:"name"`
	Served  bool   `json:"served"`
	Storage bool   `json:"storage"`
	Schema  struct {
		OpenAPIV3Schema Schema `json:"openAPIV3Schema"`
	} `json:"schema"`
}

// Schema is the subset of an OpenAPI v3 schema a structural CRD schema
// here uses.
type Schema struct {
	Description string            `json:"description,omitempty"`
	Type        string            `json:"type"`
	Properties  map[string]Schema `json:"properties,omitempty"`
	Required    []string          `json:"required,omitempty"`
}
