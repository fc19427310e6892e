// Package deploy loads the shipped deployment files (deploy/base,
// deploy/kind) strictly into their API types, for the tests that check them
// (this package's, and test/e2e's, which runs the DaemonSet's arguments and
// mounts against a real containerd).
package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Names in deploy/base that the tests rely on.
const (
	ContainerName     = "nri-cni"
	InitContainerName = "install-cni-plugins"
	// ConfigKey is the ConfigMap key holding nri.conf; every other key is a
	// CNI network config.
	ConfigKey = "nri.conf"
)

// RepoRoot returns the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// DecodeStrict decodes a YAML (or JSON) file into v: unknown fields and
// duplicate keys are errors.
func DecodeStrict(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := DecodeStrictBytes(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Kustomization is the part of kustomize's schema deploy/base uses.
type Kustomization struct {
	APIVersion   string            `json:"apiVersion"`
	Kind         string            `json:"kind"`
	Namespace    string            `json:"namespace"`
	CommonLabels map[string]string `json:"commonLabels,omitempty"`
	Labels       []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources"`
	// Patches: deploy/base-1.34's (inline JSON patches on a target).
	Patches []KustomizePatch `json:"patches,omitempty"`
}

// KustomizePatch is one of a kustomization's patches, as deploy/base-1.34
// writes them.
type KustomizePatch struct {
	Patch  string `json:"patch,omitempty"`
	Target struct {
		Group   string `json:"group,omitempty"`
		Version string `json:"version,omitempty"`
		Kind    string `json:"kind,omitempty"`
		Name    string `json:"name,omitempty"`
	} `json:"target"`
}

// Base is deploy/base, decoded: every file its kustomization lists.
type Base struct {
	Dir           string
	Kustomization Kustomization
	Objects
}

// LoadBase decodes deploy/base's kustomization and, strictly, every resource
// file it lists; each of Objects' kinds must be there exactly once.
func LoadBase(repoRoot string) (*Base, error) {
	b := &Base{Dir: filepath.Join(repoRoot, "deploy", "base")}
	if err := DecodeStrict(filepath.Join(b.Dir, "kustomization.yaml"), &b.Kustomization); err != nil {
		return nil, err
	}
	for _, r := range b.Kustomization.Resources {
		path := filepath.Join(b.Dir, r)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if err := b.Decode(path, data); err != nil {
			return nil, err
		}
	}
	if missing := b.Missing(); len(missing) > 0 {
		return nil, fmt.Errorf("%s: no %s", b.Dir, strings.Join(missing, ", "))
	}
	return b, nil
}

// Container returns the pod template's container (or init container) name.
func (b *Base) Container(name string) *corev1.Container {
	spec := &b.DaemonSet.Spec.Template.Spec
	for _, list := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// Volume returns the pod template's volume name.
func (b *Base) Volume(name string) *corev1.Volume {
	for i, v := range b.DaemonSet.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &b.DaemonSet.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

// NetworkKeys lists the ConfigMap's CNI network configs (every key but
// nri.conf), sorted.
func (b *Base) NetworkKeys() []string {
	var keys []string
	for k := range b.ConfigMap.Data {
		if k != ConfigKey {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// Covers reports whether a mount at mountPath makes path visible.
func Covers(mountPath, path string) bool {
	mountPath, path = filepath.Clean(mountPath), filepath.Clean(path)
	return path == mountPath || mountPath == "/" || strings.HasPrefix(path, mountPath+"/")
}

// MountFor returns c's volume mount that path lives on (the deepest one
// covering it), or nil.
func MountFor(c *corev1.Container, path string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if Covers(m.MountPath, path) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

// ConfigMapFiles returns the files a configMap volume shows (path inside
// the volume -> content), from the ConfigMap.
func (b *Base) ConfigMapFiles(v *corev1.Volume) (map[string]string, error) {
	cm := v.ConfigMap
	if cm == nil {
		return nil, fmt.Errorf("volume %s is not a configMap volume", v.Name)
	}
	if cm.Name != b.ConfigMap.Name {
		return nil, fmt.Errorf("volume %s: configMap %q, but the ConfigMap is %q", v.Name, cm.Name, b.ConfigMap.Name)
	}
	files := map[string]string{}
	if len(cm.Items) == 0 {
		for k, d := range b.ConfigMap.Data {
			files[k] = d
		}
		return files, nil
	}
	for _, it := range cm.Items {
		d, ok := b.ConfigMap.Data[it.Key]
		if !ok {
			return nil, fmt.Errorf("volume %s: key %q is not in the ConfigMap", v.Name, it.Key)
		}
		files[it.Path] = d
	}
	return files, nil
}

// MultusCRDFile is the NetworkAttachmentDefinition CRD Multus installs
// (v4.3.0, as is), relative to the module root.
const MultusCRDFile = "test/deploy/testdata/multus-crd-v4.3.0.yaml"

// LoadMultusCRD decodes MultusCRDFile strictly.
func LoadMultusCRD(repoRoot string) (*CRD, error) {
	var crd CRD
	if err := DecodeStrict(filepath.Join(repoRoot, MultusCRDFile), &crd); err != nil {
		return nil, err
	}
	return &crd, nil
}

// KindConfig is the part of kind's v1alpha4 Cluster schema
// deploy/kind/kind-config.yaml uses.
type KindConfig struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Name       string `json:"name,omitempty"`
	Nodes      []struct {
		Role string `json:"role"`
	} `json:"nodes,omitempty"`
	ContainerdConfigPatches []string `json:"containerdConfigPatches,omitempty"`
}

// LoadKindConfig decodes deploy/kind/kind-config.yaml.
func LoadKindConfig(repoRoot string) (*KindConfig, error) {
	var k KindConfig
	if err := DecodeStrict(filepath.Join(repoRoot, "deploy", "kind", "kind-config.yaml"), &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// NRIValidatorTable is the name of NRI's default validator table in
// containerd's config (and in kind's patch, double-quoted).
const NRIValidatorTable = `plugins."io.containerd.nri.v1.nri".default_validator`

// PatchTable returns table name of the first containerd patch — its header
// line and the lines up to the next header — or "" if the patch has none.
func (k *KindConfig) PatchTable(name string) string {
	if len(k.ContainerdConfigPatches) == 0 {
		return ""
	}
	var b strings.Builder
	in := false
	for _, line := range strings.Split(k.ContainerdConfigPatches[0], "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "[") {
			in = l == "["+name+"]"
		}
		if in {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
