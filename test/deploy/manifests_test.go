package deploy

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/test/tools/image/build"
)

func loadBase(t *testing.T) *Base {
	t.Helper()
	b, err := LoadBase(RepoRoot())
	require.NoError(t, err)
	return b
}

// runFlags mirrors `nri-cni run`'s flags; parsing the DaemonSet's args with
// it fails on any flag the binary does not have.
func runFlags(args []string) (map[string]string, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vals := map[string]*string{}
	for _, n := range []string{"config", "socket", "name", "idx", "metrics-addr"} {
		vals[n] = fs.String(n, "", "")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, &unexpectedArgs{fs.Args()}
	}
	out := map[string]string{}
	fs.Visit(func(f *flag.Flag) { out[f.Name] = *vals[f.Name] })
	return out, nil
}

type unexpectedArgs struct{ args []string }

func (e *unexpectedArgs) Error() string { return "unexpected arguments " + strings.Join(e.args, " ") }

func TestKustomizationListsExactlyTheFiles(t *testing.T) {
	b := loadBase(t)
	k := b.Kustomization
	assert.Equal(t, "kube-system", k.Namespace)
	labels := map[string]string{}
	for kk, v := range k.CommonLabels {
		labels[kk] = v
	}
	for _, l := range k.Labels {
		for kk, v := range l.Pairs {
			labels[kk] = v
		}
	}
	assert.Equal(t, "nri-cni", labels["app.kubernetes.io/name"])

	entries, err := os.ReadDir(b.Dir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		// Manifests only (a README documents them).
		if e.Name() != "kustomization.yaml" && strings.HasSuffix(e.Name(), ".yaml") {
			files = append(files, e.Name())
		}
	}
	res := append([]string(nil), k.Resources...)
	sort.Strings(res)
	assert.Equal(t, files, res, "resources = the other YAML files in deploy/base")
}

func TestDaemonSetShape(t *testing.T) {
	b := loadBase(t)
	ds := b.DaemonSet
	assert.Equal(t, "apps/v1", ds.APIVersion)
	assert.Equal(t, "DaemonSet", ds.Kind)
	assert.Equal(t, "nri-cni", ds.Name)
	assert.Equal(t, "kube-system", ds.Namespace)
	spec := ds.Spec.Template.Spec
	assert.True(t, spec.HostNetwork, "hostNetwork")
	assert.True(t, spec.HostPID, "hostPID: nri-cni reads /proc/<pid>/ns/net of sandboxes")
	assert.Equal(t, "system-node-critical", spec.PriorityClassName)
	assert.Equal(t, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, spec.Tolerations)
	assert.Equal(t, "RollingUpdate", string(ds.Spec.UpdateStrategy.Type))
	assert.Equal(t, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels, "selector matches the template")

	for _, name := range []string{ContainerName, InitContainerName} {
		c := b.Container(name)
		require.NotNil(t, c, "container %s", name)
		assert.Equal(t, build.DefaultTag, c.Image, "%s: the image make image builds", name)
		assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy, name)
		require.NotNil(t, c.SecurityContext, name)
		require.NotNil(t, c.SecurityContext.Privileged, name)
		assert.True(t, *c.SecurityContext.Privileged, name)
		assert.Empty(t, c.Command, "%s: the image's entrypoint (nri-cni) runs", name)
	}
	c := b.Container(ContainerName)
	assert.Equal(t, "10m", c.Resources.Requests.Cpu().String())
	assert.Equal(t, "32Mi", c.Resources.Requests.Memory().String())
	assert.Equal(t, "128Mi", c.Resources.Limits.Memory().String())
	assert.True(t, c.Resources.Limits.Cpu().IsZero(), "no CPU limit: throttling would stall pod creation")

	p := c.LivenessProbe
	require.NotNil(t, p)
	require.NotNil(t, p.Exec)
	assert.Equal(t, build.BinaryPath, p.Exec.Command[0], "the image's binary")
	assert.Equal(t, "healthz", p.Exec.Command[1])
	assert.Positive(t, p.InitialDelaySeconds)
	slack := time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second
	assert.GreaterOrEqual(t, slack, 30*time.Second,
		"the probe fails while containerd restarts; period x failureThreshold must allow for that")
	assert.Less(t, time.Duration(p.TimeoutSeconds)*time.Second, time.Duration(p.PeriodSeconds)*time.Second)
}

func TestDaemonSetArgsAreRunFlags(t *testing.T) {
	b := loadBase(t)
	c := b.Container(ContainerName)
	require.NotEmpty(t, c.Args)
	require.Equal(t, "run", c.Args[0])
	flags, err := runFlags(c.Args[1:])
	require.NoError(t, err, "args %q use only flags of nri-cni run", c.Args)
	assert.Equal(t, []string{"run", "--config", "/etc/nri-cni/nri.conf", "--socket", "/var/run/nri/nri.sock",
		"--metrics-addr", "127.0.0.1:9734"}, c.Args)

	host, _, err := net.SplitHostPort(flags["metrics-addr"])
	require.NoError(t, err)
	assert.True(t, net.ParseIP(host).IsLoopback(), "metrics stay on the node's loopback (hostNetwork)")
	probe := c.LivenessProbe.Exec.Command
	assert.Equal(t, []string{build.BinaryPath, "healthz", "--addr", flags["metrics-addr"]}, probe,
		"the probe asks the address the plugin serves")
}

// TestInitContainerInstallsTheAwaitHook: the second init container puts
// nri-cni's binary where nri.conf's failClosed.hookPath says the runtime
// finds it on the node, replacing an older one; the hook's socket is
// mounted at its host path.
func TestInitContainerInstallsTheAwaitHook(t *testing.T) {
	b := loadBase(t)
	ic := b.Container("install-hook")
	require.NotNil(t, ic)
	cfg := parseNriConf(t, b)
	fc := cfg.FailClosed
	require.True(t, fc.HookOn(), "deploy/base turns the await hook on")
	require.True(t, cfg.BackgroundAttach, "the hook serves background attaches")
	assert.Equal(t, []string{"install-plugins", "--replace", "--from", filepath.Dir(build.HookBinaryPath), "--to",
		"/host" + filepath.Dir(fc.HookPath), filepath.Base(build.HookBinaryPath)}, ic.Args)
	assert.Equal(t, filepath.Base(build.HookBinaryPath), filepath.Base(fc.HookPath))
	to := MountFor(ic, "/host"+filepath.Dir(fc.HookPath))
	require.NotNil(t, to)
	assert.Equal(t, filepath.Dir(fc.HookPath), b.Volume(to.Name).HostPath.Path, "installed at the host path the hook names")
	main := b.Container(ContainerName)
	sock := MountFor(main, fc.HookSocket)
	require.NotNil(t, sock, "the hook socket's dir is mounted")
	assert.Equal(t, filepath.Dir(fc.HookSocket), b.Volume(sock.Name).HostPath.Path, "at its host path")
}

func TestInitContainerInstallsWhatTheNetworksUse(t *testing.T) {
	b := loadBase(t)
	ic := b.Container(InitContainerName)
	require.Len(t, b.DaemonSet.Spec.Template.Spec.InitContainers, 2, "the plugins and the await hook")
	require.Equal(t, *ic, b.DaemonSet.Spec.Template.Spec.InitContainers[0])
	require.GreaterOrEqual(t, len(ic.Args), 6)
	assert.Equal(t, []string{"install-plugins", "--from", build.PluginDir, "--to", "/host/opt/cni/bin"}, ic.Args[:5])
	names := ic.Args[5:]
	assert.Equal(t, build.Plugins, names, "installs exactly what the image ships")

	// --to is the same node directory the plugin's binDirs mount shows.
	toMount := MountFor(ic, ic.Args[4])
	require.NotNil(t, toMount)
	assert.False(t, toMount.ReadOnly)
	cfg := parseNriConf(t, b)
	main := b.Container(ContainerName)
	binMount := MountFor(main, cfg.BinDirs[0])
	require.NotNil(t, binMount)
	assert.Equal(t, binMount.Name, toMount.Name)
	assert.Equal(t, b.Volume(binMount.Name).HostPath.Path, cfg.BinDirs[0], "binDirs[0] is the node's dir itself")

	for _, key := range b.NetworkKeys() {
		n, err := cni.Parse([]byte(b.ConfigMap.Data[key]))
		require.NoError(t, err, key)
		for _, p := range n.List.Plugins {
			assert.Contains(t, names, p.Network.Type, "%s: plugin installed", key)
			if p.Network.IPAM.Type != "" {
				assert.Contains(t, names, p.Network.IPAM.Type, "%s: IPAM plugin installed", key)
			}
		}
	}
}

func parseNriConf(t *testing.T, b *Base) config.Config {
	t.Helper()
	data, ok := b.ConfigMap.Data[ConfigKey]
	require.True(t, ok, "ConfigMap key %s", ConfigKey)
	cfg, err := config.Parse([]byte(data))
	require.NoError(t, err)
	return cfg
}

func TestConfigMapNriConf(t *testing.T) {
	b := loadBase(t)
	assert.Equal(t, "v1", b.ConfigMap.APIVersion)
	assert.Equal(t, "ConfigMap", b.ConfigMap.Kind)
	assert.Equal(t, "kube-system", b.ConfigMap.Namespace)
	cfg := parseNriConf(t, b)
	assert.Equal(t, "/etc/nri-cni/net.d", cfg.ConfDir)
	assert.Equal(t, []string{"/opt/cni/bin"}, cfg.BinDirs)
	assert.Equal(t, "/var/lib/nri-cni", cfg.StateDir)
	assert.Equal(t, "/var/lib/cni", cfg.CacheDir)
	assert.True(t, cfg.PodSelection, "podSelection")
	assert.True(t, cfg.RequireAnnotation, "requireAnnotation: opt-in only, as with Multus")
	assert.Contains(t, cfg.Namespaces.Exclude, "kube-system")
	assert.False(t, cfg.Namespaces.Allows("kube-system"), "kube-system excluded")
	assert.True(t, cfg.Namespaces.Allows("default"))
	assert.Equal(t, "info", cfg.LogLevel)
	assert.Equal(t, config.FailurePolicyFail, cfg.FailurePolicy)
	assert.Empty(t, cfg.LogFile, "logs go to stderr (kubectl logs)")
}

// The ConfigMap lets pods use exactly the capabilities its example networks
// declare: no more (a pod could claim what no plugin uses), no less (the
// README's example annotations would fail).
func TestConfigMapPodCapabilitiesMatchTheNetworks(t *testing.T) {
	b := loadBase(t)
	cfg := parseNriConf(t, b)
	declared := map[string]bool{}
	for _, key := range b.NetworkKeys() {
		n, err := cni.Parse([]byte(b.ConfigMap.Data[key]))
		require.NoError(t, err, key)
		for _, p := range n.List.Plugins {
			for c, on := range p.Network.Capabilities {
				if on {
					declared[c] = true
				}
			}
		}
	}
	var want []string
	for _, c := range config.KnownCapabilities() {
		if declared[c] {
			want = append(want, c)
		}
	}
	assert.ElementsMatch(t, want, cfg.PodCapabilities, "podCapabilities = the declared capabilities")
	assert.NotContains(t, cfg.PodCapabilities, config.CapabilityPortMappings, "no host ports from annotations")
	assert.NotContains(t, cfg.PodCapabilities, config.CapabilityIPs, "no chosen addresses from annotations")
}

func TestConfigMapNetwork(t *testing.T) {
	b := loadBase(t)
	keys := b.NetworkKeys()
	require.NotEmpty(t, keys)
	for _, k := range keys {
		assert.Contains(t, cni.Extensions, filepath.Ext(k), "%s: an extension nri-cni loads", k)
		_, err := cni.Parse([]byte(b.ConfigMap.Data[k]))
		require.NoError(t, err, k)
	}
	var conf struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.ConfigMap.Data["10-secondary.conflist"]), &conf))
	assert.Equal(t, "1.0.0", conf.CNIVersion)
	assert.Equal(t, "secondary", conf.Name)
	require.Len(t, conf.Plugins, 3)
	br := conf.Plugins[0]
	assert.Equal(t, "bridge", br["type"])
	assert.Equal(t, "nri-cni0", br["bridge"])
	assert.Equal(t, false, br["isGateway"])
	assert.Equal(t, false, br["ipMasq"])
	ipam, _ := json.Marshal(br["ipam"])
	assert.Contains(t, string(ipam), `"type":"host-local"`)
	assert.Contains(t, string(ipam), `"subnet":"10.250.0.0/16"`)
	assert.Equal(t, "tuning", conf.Plugins[1]["type"])
	assert.Equal(t, map[string]any{"mac": true}, conf.Plugins[1]["capabilities"])
	assert.Equal(t, "bandwidth", conf.Plugins[2]["type"])
	assert.Equal(t, map[string]any{"bandwidth": true}, conf.Plugins[2]["capabilities"])
}

// The required-plugins policy asks what nri.conf decides: the pods it makes
// wait for nri-cni are those nri-cni attaches networks to.
func TestRequiredPluginsPolicy(t *testing.T) {
	b := loadBase(t)
	p, pb := b.RequiredPolicy, b.RequiredPolicyBinding
	assert.Equal(t, "admissionregistration.k8s.io/v1", p.APIVersion)
	assert.Equal(t, "admissionregistration.k8s.io/v1", pb.APIVersion)
	assert.Equal(t, "nri-cni-required-plugins", p.Name)
	assert.Equal(t, p.Name, pb.Spec.PolicyName)
	require.NotNil(t, p.Spec.FailurePolicy)
	assert.Equal(t, admissionv1.Fail, *p.Spec.FailurePolicy)
	assert.Equal(t, admissionv1.IfNeededReinvocationPolicy, p.Spec.ReinvocationPolicy)
	require.NotNil(t, p.Spec.MatchConstraints)
	require.Len(t, p.Spec.MatchConstraints.ResourceRules, 1)
	rule := p.Spec.MatchConstraints.ResourceRules[0]
	assert.Equal(t, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}, rule.Operations,
		"pod CREATE, and UPDATE: networks added by hot-plug must be waited for too")
	assert.Equal(t, []string{"pods"}, rule.Resources)
	assert.Equal(t, []string{""}, rule.APIGroups)

	// nri-cni's own pod never waits for itself: hostNetwork, and labelled
	// as the policy's condition skips.
	ds := b.DaemonSet.Spec.Template
	assert.True(t, ds.Spec.HostNetwork)
	conds := map[string]string{}
	for _, c := range p.Spec.MatchConditions {
		conds[c.Name] = c.Expression
	}
	assert.Contains(t, conds["not-nri-cni"], fmt.Sprintf("labels['app.kubernetes.io/name'] != '%s'", ds.Labels["app.kubernetes.io/name"]))
	assert.Contains(t, conds["not-host-network"], "object.spec.hostNetwork")
	// nri-cni's own network-status patch (an UPDATE) is never mutated: its
	// ValidatingAdmissionPolicy lets it change that annotation alone.
	sa := fmt.Sprintf("system:serviceaccount:%s:%s", b.DaemonSet.Namespace, ds.Spec.ServiceAccountName)
	assert.Contains(t, conds["not-nri-cni-status-patch"], "request.operation == 'CREATE'")
	assert.Contains(t, conds["not-nri-cni-status-patch"], "request.userInfo.username != '"+sa+"'")
	vars := map[string]string{}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	for _, a := range []string{"k8s.v1.cni.cncf.io/networks", "nri-cni.io/networks"} {
		assert.Contains(t, vars["asks"], "'"+a+"'")
	}
	assert.True(t, strings.HasPrefix(vars["value"], "!variables.asks ? '' :"), "pods that do not ask are left alone")

	// The binding leaves out exactly the namespaces nri.conf excludes.
	cfg := parseNriConf(t, b)
	require.Empty(t, cfg.Namespaces.Include, "with namespaces.include, the binding must select those namespaces")
	require.NotNil(t, pb.Spec.MatchResources)
	assert.Equal(t, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: cfg.Namespaces.Exclude}}},
		pb.Spec.MatchResources.NamespaceSelector, "namespaces.exclude of nri.conf")
}

// deploy/base-1.34 is deploy/base with the required-plugins policy and its
// binding as v1beta1: nothing else.
func TestBase134(t *testing.T) {
	dir := filepath.Join(RepoRoot(), "deploy", "base-1.34")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"kustomization.yaml"}, names)
	var k Kustomization
	require.NoError(t, DecodeStrict(filepath.Join(dir, "kustomization.yaml"), &k))
	assert.Equal(t, []string{"../base"}, k.Resources)
	assert.Empty(t, k.Namespace, "deploy/base's")
	b := loadBase(t)
	var kinds []string
	for _, p := range k.Patches {
		assert.Equal(t, "admissionregistration.k8s.io", p.Target.Group)
		assert.Equal(t, "v1", p.Target.Version)
		kinds = append(kinds, p.Target.Kind)
		var ops []map[string]any
		require.NoError(t, DecodeStrictBytes([]byte(p.Patch), &ops))
		assert.Equal(t, []map[string]any{{"op": "replace", "path": "/apiVersion", "value": "admissionregistration.k8s.io/v1beta1"}}, ops)
	}
	assert.Equal(t, []string{b.RequiredPolicy.Kind, b.RequiredPolicyBinding.Kind}, kinds)
}
