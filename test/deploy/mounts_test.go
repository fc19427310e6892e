package deploy

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestMountsCoverEveryPathNriCniUses(t *testing.T) {
	b := loadBase(t)
	c := b.Container(ContainerName)
	cfg := parseNriConf(t, b)
	flags, err := runFlags(c.Args[1:])
	require.NoError(t, err)

	mustMount := func(what, path string) (*corev1.VolumeMount, *corev1.Volume) {
		t.Helper()
		m := MountFor(c, path)
		require.NotNil(t, m, "%s %s is on no volume mount", what, path)
		v := b.Volume(m.Name)
		require.NotNil(t, v, "mount %s names no volume", m.Name)
		return m, v
	}
	for _, p := range cfg.BinDirs {
		mustMount("binDirs", p)
	}
	for what, p := range map[string]string{"cacheDir": cfg.CacheDir, "stateDir": cfg.StateDir} {
		m, v := mustMount(what, p)
		assert.False(t, m.ReadOnly, "%s must be writable", what)
		require.NotNil(t, v.HostPath, "%s must survive the pod (hostPath)", what)
	}

	// confDir shows every network of the ConfigMap.
	m, v := mustMount("confDir", cfg.ConfDir)
	files, err := b.ConfigMapFiles(v)
	require.NoError(t, err)
	for _, k := range b.NetworkKeys() {
		rel, err := filepath.Rel(m.MountPath, filepath.Join(cfg.ConfDir, k))
		require.NoError(t, err)
		assert.Equal(t, b.ConfigMap.Data[k], files[filepath.Join(m.SubPath, rel)], "network %s in confDir", k)
	}

	// The config file is the ConfigMap's nri.conf.
	m, v = mustMount("--config", flags["config"])
	files, err = b.ConfigMapFiles(v)
	require.NoError(t, err)
	rel, err := filepath.Rel(m.MountPath, flags["config"])
	require.NoError(t, err)
	assert.Equal(t, b.ConfigMap.Data[ConfigKey], files[filepath.Join(m.SubPath, rel)], "--config is nri.conf")

	// The socket's directory, never the socket: containerd recreates it.
	sockDir := filepath.Dir(flags["socket"])
	m, v = mustMount("the socket's dir", flags["socket"])
	assert.Equal(t, sockDir, m.MountPath, "mount the socket's directory")
	require.NotNil(t, v.HostPath)
	assert.Equal(t, sockDir, v.HostPath.Path)
	require.NotNil(t, v.HostPath.Type)
	assert.Equal(t, corev1.HostPathDirectoryOrCreate, *v.HostPath.Type)

	// Pod netns pinned after nri-cni started must show up inside it.
	m, v = mustMount("netns dir", "/var/run/netns/cni-x")
	assert.Equal(t, "/var/run/netns", m.MountPath)
	require.NotNil(t, m.MountPropagation)
	assert.Equal(t, corev1.MountPropagationHostToContainer, *m.MountPropagation)
	require.NotNil(t, v.HostPath)
	assert.Equal(t, "/var/run/netns", v.HostPath.Path)
}

// The host's / at /host: the CNI plugins run chrooted into it (nri.conf
// pluginRoot) and the fail-closed check reads the runtime's config under it
// (failClosed.nodeRoot). Pod netns pinned after nri-cni started must appear
// under it (HostToContainer); plugins write the host's files (writable).
// binDirs are host paths, so the host's dirs the init container fills.
func TestHostRootMount(t *testing.T) {
	b := loadBase(t)
	c := b.Container(ContainerName)
	cfg := parseNriConf(t, b)
	require.NotEmpty(t, cfg.PluginRoot, "deploy/base runs the plugins against the host")
	m := MountFor(c, cfg.PluginRoot)
	require.NotNil(t, m, "pluginRoot %s is on no mount", cfg.PluginRoot)
	assert.Equal(t, cfg.PluginRoot, m.MountPath, "pluginRoot is the mount itself")
	v := b.Volume(m.Name)
	require.NotNil(t, v)
	require.NotNil(t, v.HostPath, "the host's root (hostPath)")
	assert.Equal(t, "/", v.HostPath.Path)
	require.NotNil(t, v.HostPath.Type)
	assert.Equal(t, corev1.HostPathDirectory, *v.HostPath.Type)
	require.NotNil(t, m.MountPropagation, "pins made later must show")
	assert.Equal(t, corev1.MountPropagationHostToContainer, *m.MountPropagation)
	assert.False(t, m.ReadOnly, "plugins write the host's /var/lib/cni, /run, iptables")
	assert.Equal(t, cfg.PluginRoot, cfg.FailClosed.NodeRoot, "the fail-closed check reads the host's /etc there")

	ic := b.Container(InitContainerName)
	require.NotNil(t, ic)
	to := ""
	for i, a := range ic.Args {
		if a == "--to" && i+1 < len(ic.Args) {
			to = ic.Args[i+1]
		}
	}
	im := MountFor(ic, to)
	require.NotNil(t, im, "the init container's --to %s", to)
	iv := b.Volume(im.Name)
	require.NotNil(t, iv.HostPath)
	assert.Contains(t, cfg.BinDirs, iv.HostPath.Path, "binDirs name the host dir the plugins are installed into")
}

func TestVolumesAreSaneAndAllUsed(t *testing.T) {
	b := loadBase(t)
	spec := b.DaemonSet.Spec.Template.Spec
	used := map[string]bool{}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			v := b.Volume(m.Name)
			require.NotNil(t, v, "%s: mount %s names no volume", c.Name, m.Name)
			used[m.Name] = true
			if m.MountPropagation != nil {
				assert.NotEqual(t, corev1.MountPropagationBidirectional, *m.MountPropagation,
					"%s: %s: nothing mounts back into the host", c.Name, m.Name)
			}
			if v.HostPath != nil && c.Name == ContainerName {
				if v.HostPath.Path == "/" {
					// The host's root (TestHostRootMount).
					assert.Equal(t, "/host", m.MountPath, m.Name)
					continue
				}
				assert.Equal(t, v.HostPath.Path, m.MountPath,
					"%s: node paths are seen at the same path (the runtime's netns and cache paths)", m.Name)
			}
		}
	}
	for _, v := range spec.Volumes {
		assert.True(t, used[v.Name], "volume %s is mounted", v.Name)
		if v.HostPath != nil {
			require.NotNil(t, v.HostPath.Type, v.Name)
			assert.Contains(t, []corev1.HostPathType{corev1.HostPathDirectory, corev1.HostPathDirectoryOrCreate},
				*v.HostPath.Type, "%s: a directory, never a socket or file", v.Name)
			assert.False(t, strings.HasSuffix(v.HostPath.Path, ".sock"), v.Name)
		}
		if v.ConfigMap != nil {
			_, err := b.ConfigMapFiles(&v)
			assert.NoError(t, err)
		}
	}
}

// hooksDEntry is the hooks.d 1.0.0 schema (containers/common pkg/hooks).
type hooksDEntry struct {
	Version string `json:"version"`
	Hook    struct {
		Path    string   `json:"path"`
		Args    []string `json:"args"`
		Env     []string `json:"env"`
		Timeout *int     `json:"timeout"`
	} `json:"hook"`
	When struct {
		Always        *bool             `json:"always"`
		Annotations   map[string]string `json:"annotations"`
		Commands      []string          `json:"commands"`
		HasBindMounts *bool             `json:"hasBindMounts"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

// TestHooksDEntryIsValid: both shipped hooks.d entries (make install-hook
// HOOK_MATCH=always, the default, and =annotation) are the same hook and
// differ only in `when`.
func TestHooksDEntryIsValid(t *testing.T) {
	var always, annotated hooksDEntry
	require.NoError(t, DecodeStrict(filepath.Join(RepoRoot(), "hooks.d", "nri-cni.json"), &always))
	require.NoError(t, DecodeStrict(filepath.Join(RepoRoot(), "hooks.d", "nri-cni-annotated.json"), &annotated))
	for _, h := range []hooksDEntry{always, annotated} {
		assert.Equal(t, "1.0.0", h.Version)
		assert.True(t, filepath.IsAbs(h.Hook.Path))
		assert.Equal(t, "/usr/local/bin/nri-cni", h.Hook.Path, "where make install-hook puts the binary")
		assert.Contains(t, h.Hook.Args, "hook")
		assert.Subset(t, []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}, h.Stages)
		assert.NotEmpty(t, h.Stages)
	}
	require.NotNil(t, always.When.Always)
	assert.True(t, *always.When.Always)
	assert.Nil(t, annotated.When.Always, "hooks.d ANDs the conditions: always would add nothing")
	require.Len(t, annotated.When.Annotations, 1)
	for k, v := range annotated.When.Annotations {
		key, val := regexp.MustCompile(k), regexp.MustCompile(v)
		assert.True(t, key.MatchString("nri-cni.io/networks"))
		assert.False(t, key.MatchString("nri-cni.io/networks-x"), "the key is anchored")
		assert.False(t, key.MatchString("nri-cnixio/networks"), "the dot is literal")
		assert.True(t, val.MatchString("storage, data@net5"))
		assert.False(t, val.MatchString(" \t"), "a blank value (the opt-out) runs no hook")
	}
	annotated.When = always.When
	assert.Equal(t, always, annotated, "the same hook, stages and timeout")
}

func TestKindConfigPatchesNRI(t *testing.T) {
	k, err := LoadKindConfig(RepoRoot())
	require.NoError(t, err)
	assert.Equal(t, "Cluster", k.Kind)
	assert.Equal(t, "kind.x-k8s.io/v1alpha4", k.APIVersion)
	require.NotEmpty(t, k.Nodes)
	require.Len(t, k.ContainerdConfigPatches, 1)
	patch := k.ContainerdConfigPatches[0]
	assert.Contains(t, patch, `[plugins."io.containerd.nri.v1.nri"]`)
	assert.Contains(t, patch, "disable = false")
	// Fail-closed per pod: the default validator on, no node-wide list (a
	// node-wide one blocks every container while nri-cni is down, its own
	// DaemonSet pod's included).
	validator := k.PatchTable(NRIValidatorTable)
	assert.Contains(t, validator, "enable = true")
	for _, line := range strings.Split(validator, "\n") {
		assert.False(t, strings.HasPrefix(line, "required_plugins"), "no node-wide required_plugins: %q", line)
	}
	for _, line := range strings.Split(patch, "\n") {
		assert.False(t, strings.HasPrefix(strings.TrimSpace(line), "version"),
			"a patch with a version is skipped by kind unless it matches the node's config version")
	}
}

// TestKubectlKustomizeRenders renders deploy/base with kubectl's built-in
// kustomize, when kubectl is installed, and decodes the output strictly.
func TestKubectlKustomizeRenders(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(RepoRoot(), "deploy", "base")).Output()
	require.NoError(t, err, "kubectl kustomize")
	var objs Objects
	require.NoError(t, objs.Decode("kubectl kustomize deploy/base", out))
	assert.Empty(t, objs.Missing(), "every kind rendered")
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		switch obj.Kind {
		case "ConfigMap", "DaemonSet", "ServiceAccount":
			assert.Equal(t, "kube-system", obj.Metadata.Namespace, obj.Kind)
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass",
			"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
			// kustomize up to v5.7 takes these for namespaced
			// (kubernetes-sigs/kustomize#6051; DeviceClass is newer than
			// its list of cluster-scoped kinds); kubectl and the API
			// server drop the namespace of a cluster-scoped object.
			assert.Contains(t, []string{"", "kube-system"}, obj.Metadata.Namespace, obj.Kind)
		default:
			assert.Empty(t, obj.Metadata.Namespace, "%s is cluster-scoped", obj.Kind)
		}
		assert.Equal(t, "nri-cni", obj.Metadata.Labels["app.kubernetes.io/name"], obj.Kind)
	}
	assert.Equal(t, "nri-cni", objs.DaemonSet.Spec.Selector.MatchLabels["app.kubernetes.io/name"])
	assert.Equal(t, "kube-system", objs.ClusterRoleBinding.Subjects[0].Namespace)
}
