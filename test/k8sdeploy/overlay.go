// Package k8sdeploy deploys nri-cni on a test/cluster node the way a user
// does: the image built as `make image` builds it, loaded into the node
// runtime's image store (containerd's or CRI-O's), and deploy/base applied
// with `kubectl apply -k` through a kustomize overlay that changes only what
// isolation from the host and from other runs needs (host paths, the NRI
// socket's directory, the metrics port, the example network's bridge and
// subnet, imagePullPolicy Never) plus what the tiers test on top of
// deploy/base (hot-plug; MultiNetworkPolicy's CRD and component, enforcing
// with WithMultiNetworkPolicy). Used by the Kubernetes e2e tiers (test/k8s,
// test/k8scrio), `make demo-k8s` and the k8s section of `make bench`. Like
// the harness, it does not import "testing".
package k8sdeploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
)

// Overlay is a kustomize overlay of deploy/base and the node paths it points
// nri-cni at. Close undoes what WriteOverlay did on the host.
type Overlay struct {
	Dir         string // kustomization.yaml and its patches
	NetName     string // the example network's name, as shipped (the annotation's value)
	Bridge      string // its bridge (unique)
	Subnet      string // its subnet (unique)
	MetricsAddr string // --metrics-addr and the liveness probe's --addr
	// APIHost and APIPort: where nri-cni's in-cluster client reaches the API
	// server (KUBERNETES_SERVICE_HOST/PORT; no kube-proxy serves the
	// kubernetes Service's cluster IP on the test node).
	APIHost, APIPort string
	// SharedNamespace is the one namespace nri.conf's
	// kubernetes.sharedNamespaces lists (unique; the tests create it).
	SharedNamespace string
	// HostNetsNamespace is the one namespace whose NADs may reach the host
	// (unique; the tests create it): its kubernetes.nadPolicy rule allows
	// bridge with isGateway and ipMasq, portmap (pods may use
	// nri-cni.io/port-mappings: podCapabilities), and the dhcp IPAM with a
	// daemon socket under DHCPDir (a node path).
	HostNetsNamespace, DHCPDir string
	// DevicesNamespace is the one namespace whose NADs may run the
	// recording fake CNI plugin (type cni-recorder, built into CNIBin;
	// test/fakes/cni-recorder) with its record files under RecordDir (a
	// node path, bound into HostRoot: the plugins run chrooted there):
	// device-backed networks whose plugin moves the device into the pod
	// (its "moveDevice"). Unique; the tests create it.
	DevicesNamespace, RecordDir string
	// DeviceInfoDir is nri.conf's kubernetes.deviceInfoDir (a node path,
	// unique, bound into HostRoot): a fake device plugin writes its
	// devices' files under DeviceInfoDir/dp for nri-cni to find.
	DeviceInfoDir string
	// PodResourcesSocket is nri.conf's kubernetes.podResourcesSocket: the
	// node kubelet's (KubeletDir/pod-resources/kubelet.sock; its directory
	// is bound into HostRoot). "" when KubeletDir is.
	PodResourcesSocket string

	// Node paths behind the DaemonSet's hostPath volumes.
	StateDir string // for /var/lib/nri-cni: nri-cni's records
	CacheDir string // for /var/lib/cni: libcni's cache, host-local's addresses
	CNIBin   string // for /opt/cni/bin: filled by the init container
	CNIConf  string // for /etc/cni
	NRIDir   string // for /var/run/nri: the dir of the node runtime's nri.sock
	NetnsDir string // for /var/run/netns: where the node runtime pins pod netns
	// HostRoot is for / (nri.conf pluginRoot: the CNI plugins run chrooted
	// into it; the fail-closed check reads the runtime's config under it):
	// the test node is this machine, so a stand-in of its root
	// (harness.MountNodeRoot: this machine's /usr, /etc, /proc, ... with
	// the node's private dirs at their node paths: CNIBin at /opt/cni/bin,
	// CacheDir at /var/lib/cni, NetnsDir with the runtime's pins, DHCPDir,
	// the runtime's config), a shared mount as HostToContainer needs. Not
	// this machine's / itself: a recursive bind of it would hold every other
	// test's mounts in nri-cni's container (this VM's / is private).
	HostRoot string
	// RunDir is for /var/run/nri-cni (the await hook's socket) and HookBin
	// for /opt/nri-cni/bin (the hook's binary): the runtime runs the hook on
	// the node, so nri.conf names them by their node paths, and nri-cni
	// mounts RunDir there too.
	RunDir, HookBin string
	// KubeletDir is the node kubelet's --root-dir, for /var/lib/kubelet: the
	// DRA driver's sockets (plugins/nri-cni.io, plugins_registry) are
	// mounted at their host paths (the kubelet dials the path the plugin
	// registers) and nri.conf's kubernetes.dra.kubeletDir names it.
	KubeletDir string
	// MultiNetworkPolicy: nri.conf's kubernetes.multiNetworkPolicy.enabled
	// (WithMultiNetworkPolicy). The CRD and deploy/multinetworkpolicy's
	// RBAC and admission policy are applied either way.
	MultiNetworkPolicy bool

	unshare, unroot func() error
}

// Option changes what WriteOverlay (and Deploy) deploy.
type Option func(*Overlay)

// WithMultiNetworkPolicy turns MultiNetworkPolicy enforcement on in the
// overlay's nri.conf.
func WithMultiNetworkPolicy() Option { return func(o *Overlay) { o.MultiNetworkPolicy = true } }

// Kubectl runs kubectl (a cluster's) and returns its output.
type Kubectl func(ctx context.Context, args ...string) (string, error)

// RenderBase renders deploy/base the way `kubectl apply -k` will (`kubectl
// kustomize`) and decodes the output strictly: every kind deploy.Objects
// holds, once, no unknown fields. The overlay's patches are computed
// against this, not against the files as written.
func RenderBase(ctx context.Context, kubectl Kubectl) (*deploy.Base, error) {
	b := &deploy.Base{Dir: filepath.Join(harness.RepoRoot(), "deploy", "base")}
	out, err := kubectl(ctx, "kustomize", b.Dir)
	if err != nil {
		return nil, err
	}
	if err := decodeRendered(b, out); err != nil {
		return nil, err
	}
	return b, nil
}

func decodeRendered(b *deploy.Base, out string) error {
	source := "kubectl kustomize " + b.Dir
	if err := b.Decode(source, []byte(out)); err != nil {
		return err
	}
	if missing := b.Missing(); len(missing) > 0 {
		return fmt.Errorf("%s: no %s", source, strings.Join(missing, ", "))
	}
	return nil
}

// WriteOverlay renders deploy/base with kubectl (RenderBase), writes an
// overlay of it into dir/overlay for the node whose runtime is rt (its NRI
// socket's directory and where it pins pod netns differ by runtime), creates
// the node dirs under dir/node, makes the pinned-netns dir a shared
// mount (so HostToContainer propagation reaches nri-cni, as /var/run/netns
// does on a node) and mounts the stand-in of the node's root (HostRoot, for
// the DaemonSet's hostPath / that the plugins run chrooted into). apiHost and apiPort are the API server's address for the
// in-cluster client; kubeletDir the kubelet's --root-dir. A hostPath of the base without a private stand-in, or a
// metrics address missing from the args or the liveness probe, is an error.
func WriteOverlay(ctx context.Context, dir string, rt cluster.NodeRuntime, kubectl Kubectl, apiHost, apiPort, kubeletDir string, opts ...Option) (o *Overlay, err error) {
	// The DaemonSet dials /var/run/nri/nri.sock: the directory is mounted,
	// the file name must match.
	if filepath.Base(rt.NRIAddress()) != "nri.sock" {
		return nil, fmt.Errorf("overlay: %s's NRI socket %s is not named nri.sock, as deploy/base's --socket expects", rt.Name(), rt.NRIAddress())
	}
	b, err := RenderBase(ctx, kubectl)
	if err != nil {
		return nil, err
	}
	node := filepath.Join(dir, "node")
	o = &Overlay{Dir: filepath.Join(dir, "overlay"), Bridge: harness.RandomName("nck"), Subnet: harness.RandomSubnet(180),
		StateDir: filepath.Join(node, "state"), CacheDir: filepath.Join(node, "cni-cache"),
		CNIBin: filepath.Join(node, "cni-bin"), CNIConf: filepath.Join(node, "cni-conf"), NRIDir: filepath.Dir(rt.NRIAddress()),
		HostRoot: filepath.Join(node, "root"), RunDir: filepath.Join(node, "run"), HookBin: filepath.Join(node, "hook-bin"),
		DHCPDir: filepath.Join(node, "dhcp"), NetnsDir: rt.NetnsDir(), APIHost: apiHost, APIPort: apiPort,
		KubeletDir: kubeletDir, RecordDir: filepath.Join(node, "records"), DeviceInfoDir: filepath.Join(node, "devinfo")}
	for _, opt := range opts {
		opt(o)
	}
	if kubeletDir != "" {
		o.PodResourcesSocket = filepath.Join(kubeletDir, "pod-resources", "kubelet.sock")
	}
	if o.MetricsAddr, err = freeLoopbackAddr(); err != nil {
		return nil, err
	}
	keys := b.NetworkKeys()
	if len(keys) != 1 {
		return nil, fmt.Errorf("deploy/base: want one example network in the ConfigMap, have %v", keys)
	}
	if o.NetName, err = b.RewriteBridge(keys[0], o.Bridge, o.Subnet); err != nil {
		return nil, fmt.Errorf("deploy/base: %w", err)
	}
	dsOps, err := daemonSetOps(b, o)
	if err != nil {
		return nil, err
	}
	cmOps := []jsonOp{{Op: "replace", Path: "/data/" + pointerEscape(keys[0]), Value: b.ConfigMap.Data[keys[0]]}}
	o.SharedNamespace = harness.RandomName("nad-shared-")
	err = b.EditConfig(func(conf map[string]any) error {
		k, ok := conf["kubernetes"].(map[string]any)
		if !ok {
			return errors.New("no kubernetes section (Kubernetes mode must ship on)")
		}
		k["sharedNamespaces"] = []string{o.SharedNamespace}
		// Hot-plug on (with deploy/hotplug's RBAC, a resource of the overlay).
		k["hotplug"] = true
		// MultiNetworkPolicy enforced on every pod of the tier
		// (WithMultiNetworkPolicy; the CRD and deploy/multinetworkpolicy's
		// RBAC and admission policy are in the kustomization below either
		// way): the other tests' pods run under it, selected by no policy.
		if o.MultiNetworkPolicy {
			k["multiNetworkPolicy"] = map[string]any{"enabled": true}
		}
		// Drift checks often enough for a test to see one.
		conf["checkInterval"] = "3s"
		// The cni-args key the NPWG tests pass (off in deploy/base).
		conf["podCNIArgs"] = []string{"team"}
		// The DRA driver (on in deploy/base) registers with this node's
		// kubelet, whose root is not /var/lib/kubelet.
		dra, _ := k["dra"].(map[string]any)
		if dra == nil || dra["enabled"] != true {
			return errors.New("kubernetes.dra.enabled is not true (the DRA driver must ship on)")
		}
		dra["kubeletDir"] = o.KubeletDir
		// The await hook runs on the node: its socket and binary by their
		// node paths.
		fc, _ := conf["failClosed"].(map[string]any)
		if fc == nil || fc["hookSocket"] == nil || fc["hookPath"] == nil {
			return errors.New("failClosed.hookSocket and hookPath are not set (the await hook must ship on)")
		}
		fc["hookSocket"] = filepath.Join(o.RunDir, filepath.Base(fc["hookSocket"].(string)))
		fc["hookPath"] = filepath.Join(o.HookBin, filepath.Base(fc["hookPath"].(string)))
		if err := o.editHostRoot(conf, rt); err != nil {
			return err
		}
		return o.editDevices(conf)
	})
	if err != nil {
		return nil, err
	}
	cmOps = append(cmOps, jsonOp{Op: "replace", Path: "/data/" + pointerEscape(deploy.ConfigKey), Value: b.ConfigMap.Data[deploy.ConfigKey]})
	dirs := []string{o.Dir, o.StateDir, o.CacheDir, o.CNIBin, o.CNIConf, o.NetnsDir, o.RunDir, o.HookBin, o.DHCPDir, o.HostRoot,
		o.RecordDir, o.DeviceInfoDir}
	if o.PodResourcesSocket != "" {
		dirs = append(dirs, filepath.Dir(o.PodResourcesSocket)) // the kubelet's (made if it has not yet)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("overlay: %w", err)
		}
	}
	// The node admin's part of DevicesNamespace's networks: the plugin in
	// the node's bin dir (the init container adds only what is missing).
	if _, err := harness.GoBuild(o.CNIBin, "./test/fakes/cni-recorder", RecorderType); err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	// deploy/base's MutatingAdmissionPolicy is admissionregistration.k8s.io/v1
	// (Kubernetes >= 1.36); an older API server gets deploy/base-1.34, the
	// same with it as v1beta1 (which test/cluster serves there).
	baseDir, err := baseFor(ctx, kubectl, b.Dir)
	if err != nil {
		return nil, err
	}
	base, err := filepath.Rel(o.Dir, baseDir)
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	hotplugRBAC, err := filepath.Rel(o.Dir, filepath.Join(filepath.Dir(b.Dir), "hotplug"))
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	// MultiNetworkPolicy: the CRD and deploy/multinetworkpolicy (a
	// Component: its RBAC, its admission policy and an nri.conf patch).
	// kustomize applies a kustomization's components before its own
	// patches, so the overlay's configmap.json (EditConfig's, above: on
	// with WithMultiNetworkPolicy, else off) replaces the component's
	// nri.conf, which is deploy/base's plus the section and would drop the
	// overlay's edits.
	mnpCRD, err := filepath.Rel(o.Dir, filepath.Join(filepath.Dir(b.Dir), "crds", "multinetworkpolicy"))
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	mnp, err := filepath.Rel(o.Dir, filepath.Join(filepath.Dir(b.Dir), "multinetworkpolicy"))
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	kust := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
		"resources":  []string{base, hotplugRBAC, mnpCRD},
		"components": []string{mnp},
		"patches": []map[string]any{
			{"path": "daemonset.json", "target": map[string]string{"kind": "DaemonSet", "name": b.DaemonSet.Name}},
			{"path": "configmap.json", "target": map[string]string{"kind": "ConfigMap", "name": b.ConfigMap.Name}},
		},
	}
	for name, v := range map[string]any{"kustomization.yaml": kust, "daemonset.json": dsOps, "configmap.json": cmOps} {
		if err := writeFile(filepath.Join(o.Dir, name), v); err != nil {
			return nil, err
		}
	}
	if o.unshare, err = deploy.ShareMount(o.NetnsDir); err != nil {
		return nil, err
	}
	if o.unroot, err = o.mountHostRoot(rt); err != nil {
		return nil, errors.Join(err, o.Close())
	}
	return o, nil
}

// mountHostRoot mounts the node root's stand-in at HostRoot (after NetnsDir
// is shared: its bind there passes the runtime's pins on).
func (o *Overlay) mountHostRoot(rt cluster.NodeRuntime) (func() error, error) {
	binds := []harness.RootBind{
		{Source: o.CNIBin, Path: "/opt/cni/bin", ReadOnly: true},
		{Source: o.CacheDir, Path: "/var/lib/cni"},
		{Source: o.NetnsDir, Path: o.NetnsDir, Peer: true},
		{Source: o.DHCPDir, Path: o.DHCPDir},
		{Source: o.RecordDir, Path: o.RecordDir},
		{Source: o.DeviceInfoDir, Path: o.DeviceInfoDir},
		// The await hook's binary at the node path nri.conf names: nri-cni
		// checks it can run there (failClosed.hookPath under nodeRoot).
		{Source: o.HookBin, Path: o.HookBin, ReadOnly: true},
	}
	// nri-cni dials the kubelet's PodResources socket under pluginRoot. The
	// directory, not the socket: a restarted kubelet makes a new one.
	if o.PodResourcesSocket != "" {
		d := filepath.Dir(o.PodResourcesSocket)
		binds = append(binds, harness.RootBind{Source: d, Path: d})
	}
	// The runtime's config and drop-ins (failClosed's paths name them).
	for _, p := range []string{rt.ConfigFile(), rt.ConfDir()} {
		if _, err := os.Stat(p); err == nil {
			binds = append(binds, harness.RootBind{Source: p, Path: p, ReadOnly: true})
		}
	}
	return harness.MountNodeRoot(o.HostRoot, true, binds...)
}

// baseFor is the kustomization to apply on the cluster kubectl talks to:
// deploy/base (baseDir), or deploy/base-1.34 when the API server is older
// than 1.36.
func baseFor(ctx context.Context, kubectl Kubectl, baseDir string) (string, error) {
	out, err := kubectl(ctx, "get", "--raw", "/version")
	if err != nil {
		return "", fmt.Errorf("overlay: the API server's version: %w", err)
	}
	var info struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return "", fmt.Errorf("overlay: the API server's version %q: %w", out, err)
	}
	v, err := version.ParseSemantic(info.GitVersion)
	if err != nil {
		return "", fmt.Errorf("overlay: the API server's version: %w", err)
	}
	if v.Major() == 1 && v.Minor() < 36 {
		return filepath.Join(filepath.Dir(baseDir), "base-1.34"), nil
	}
	return baseDir, nil
}

// Close unmounts the node root's stand-in, undoes the shared mount,
// deletes the example network's bridge and removes the record and
// device-info dirs and the recorder binary (all unique to this overlay).
// Call it after the cluster is closed.
func (o *Overlay) Close() error {
	var errs []error
	if o.unroot != nil {
		if err := o.unroot(); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", o.HostRoot, err))
		} else {
			_ = os.Remove(o.HostRoot) // empty now; never removed recursively
			o.removeDeviceFiles(&errs)
		}
		o.unroot = nil
	}
	if o.unshare != nil {
		// cluster.Close unmounts everything under its dir, this too.
		if err := o.unshare(); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", o.NetnsDir, err))
		}
		o.unshare = nil
	}
	if o.Bridge != "" {
		if _, err := net.InterfaceByName(o.Bridge); err == nil {
			if out, err := exec.Command("ip", "link", "del", o.Bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("deleting bridge %s: %w: %s", o.Bridge, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// Secondary is the example network as the harness sees it (its host-local
// address files under CacheDir).
func (o *Overlay) Secondary() harness.Secondary {
	return harness.Secondary{Name: o.NetName, Bridge: o.Bridge, Subnet: o.Subnet, IPAMDir: filepath.Join(o.CacheDir, "networks")}
}

// jsonOp is one RFC 6902 operation.
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// daemonSetOps are the DaemonSet's patches, addressed by the indexes the
// shipped manifest has (found by name, so a reordered base still works).
func daemonSetOps(b *deploy.Base, o *Overlay) ([]jsonOp, error) {
	const spec = "/spec/template/spec"
	ps := b.DaemonSet.Spec.Template.Spec
	var ops []jsonOp
	for i := range ps.InitContainers {
		ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/initContainers/%d/imagePullPolicy", spec, i), "Never"})
	}
	found := false
	for i, c := range ps.Containers {
		p := fmt.Sprintf("%s/containers/%d", spec, i)
		ops = append(ops, jsonOp{"replace", p + "/imagePullPolicy", "Never"})
		if c.Name != deploy.ContainerName {
			continue
		}
		found = true
		j := flagValue(c.Args, "--metrics-addr")
		if j < 0 {
			return nil, fmt.Errorf("deploy/base: container %s has no --metrics-addr", c.Name)
		}
		ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/args/%d", p, j), o.MetricsAddr})
		// The probes must check the address nri-cni now listens on, or the
		// kubelet kills it (liveness) or never counts it Ready (readiness).
		for _, pr := range []struct {
			key, name string
			probe     *corev1.Probe
		}{{"livenessProbe", "liveness probe", c.LivenessProbe}, {"readinessProbe", "readiness probe", c.ReadinessProbe}} {
			if pr.probe == nil || pr.probe.Exec == nil {
				return nil, fmt.Errorf("deploy/base: container %s has no exec %s", c.Name, pr.name)
			}
			j = flagValue(pr.probe.Exec.Command, "--addr")
			if j < 0 {
				return nil, fmt.Errorf("deploy/base: container %s: %s has no --addr", c.Name, pr.name)
			}
			ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/%s/exec/command/%d", p, pr.key, j), o.MetricsAddr})
		}
		if o.APIHost != "" {
			// The container's env wins over the kubelet's service variables.
			for _, e := range []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: o.APIHost},
				{Name: "KUBERNETES_SERVICE_PORT", Value: o.APIPort}} {
				ops = append(ops, jsonOp{"add", p + "/env/-", e})
			}
		}
		for k, m := range c.VolumeMounts {
			if to := samePath(m.MountPath, o); to != "" {
				ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/volumeMounts/%d/mountPath", p, k), to})
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("deploy/base: no container %s", deploy.ContainerName)
	}
	standIn := map[string]string{
		"/var/run/nri": o.NRIDir, "/var/run/netns": o.NetnsDir, "/opt/cni/bin": o.CNIBin,
		"/etc/cni": o.CNIConf, "/var/lib/cni": o.CacheDir, "/var/lib/nri-cni": o.StateDir,
		"/": o.HostRoot, "/var/run/nri-cni": o.RunDir, "/opt/nri-cni/bin": o.HookBin,
	}
	for i, v := range ps.Volumes {
		if v.HostPath == nil {
			continue
		}
		to, ok := standIn[v.HostPath.Path]
		if !ok {
			to = kubeletPath(v.HostPath.Path, o.KubeletDir)
			ok = to != ""
		}
		if !ok {
			return nil, fmt.Errorf("deploy/base: hostPath %s (volume %s) has no private stand-in", v.HostPath.Path, v.Name)
		}
		ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/volumes/%d/hostPath/path", spec, i), to})
	}
	return ops, nil
}

// samePath is where a container mount must be for nri-cni to see the path
// the node uses ("" when the shipped path stays): the runtimes pin netns
// elsewhere here, and nri-cni opens the pinned path it is given; the kubelet
// dials the DRA socket path nri-cni registers.
func samePath(mountPath string, o *Overlay) string {
	switch mountPath {
	case "/var/run/netns":
		return o.NetnsDir
	case "/var/run/nri-cni":
		return o.RunDir
	}
	return kubeletPath(mountPath, o.KubeletDir)
}

// kubeletPath maps a path under /var/lib/kubelet to the same path under the
// node kubelet's root dir ("" when p is not under /var/lib/kubelet).
func kubeletPath(p, kubeletDir string) string {
	const root = "/var/lib/kubelet"
	if p != root && !strings.HasPrefix(p, root+"/") {
		return ""
	}
	return kubeletDir + strings.TrimPrefix(p, root)
}

// flagValue is the index of flag's value in args, -1 if absent.
func flagValue(args []string, flag string) int {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return i + 1
		}
	}
	return -1
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// writeFile writes v as YAML (.yaml) or JSON.
func writeFile(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err == nil && strings.HasSuffix(path, ".yaml") {
		data, err = yaml.JSONToYAML(data)
	}
	if err != nil {
		return fmt.Errorf("overlay %s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
}

// freeLoopbackAddr is 127.0.0.1:<a port free right now>.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// editHostRoot: the fail-closed check reads the node runtime's own config
// files (at their paths under HostRoot; deploy/base names a node's
// /etc/containerd/config.toml or /etc/crio), pods may use
// nri-cni.io/port-mappings, and the NADs of HostNetsNamespace may reach the
// host (portmap, dhcp, ipMasq).
func (o *Overlay) editHostRoot(conf map[string]any, rt cluster.NodeRuntime) error {
	if root, _ := conf["pluginRoot"].(string); root == "" || root == "/" {
		return errors.New("pluginRoot is not set (the plugins must run against the host)")
	}
	fc, _ := conf["failClosed"].(map[string]any)
	if fc == nil {
		return errors.New("no failClosed section")
	}
	if isCRIO(rt) {
		fc["crioConfig"], fc["crioConfigDir"] = rt.ConfigFile(), rt.ConfDir()
	} else {
		fc["containerdConfig"] = rt.ConfigFile()
	}
	caps, _ := conf["podCapabilities"].([]any)
	conf["podCapabilities"] = append(caps, "portMappings")
	_, nss, err := nadPolicyNamespaces(conf)
	if err != nil {
		return err
	}
	o.HostNetsNamespace = harness.RandomName("host-nets-")
	nss[o.HostNetsNamespace] = map[string]any{
		"types":   []string{"bridge", "host-local", "dhcp", "portmap"},
		"bridges": []string{"nad-*"}, "ipamRanges": []string{"10.251.0.0/16"},
		"paths": []string{o.DHCPDir}, "hostGateway": true,
	}
	return nil
}

// nadPolicyNamespaces returns nri.conf's kubernetes section and its
// nadPolicy.namespaces (made if absent).
func nadPolicyNamespaces(conf map[string]any) (k, nss map[string]any, err error) {
	k, _ = conf["kubernetes"].(map[string]any)
	np, _ := k["nadPolicy"].(map[string]any)
	if np == nil {
		return nil, nil, errors.New("no kubernetes.nadPolicy")
	}
	if nss, _ = np["namespaces"].(map[string]any); nss == nil {
		nss = map[string]any{}
		np["namespaces"] = nss
	}
	return k, nss, nil
}

// NADPolicyNamespaces is nri.conf's kubernetes section and its
// kubernetes.nadPolicy.namespaces (made if absent), for a test that gives
// namespaces of its own a rule.
func NADPolicyNamespaces(conf map[string]any) (k, nss map[string]any, err error) {
	return nadPolicyNamespaces(conf)
}

// RecorderType is the recording fake CNI plugin's type (in CNIBin).
const RecorderType = "cni-recorder"

// editDevices: nri-cni reads the node kubelet's device allocations
// (kubernetes.podResourcesSocket) and keeps the NPWG device-info files in
// DeviceInfoDir (kubernetes.deviceInfoDir); the NADs of DevicesNamespace may
// run cni-recorder writing under RecordDir. The policy refuses every
// deviceID or pciBusID key of a NAD's config whatever the rule says:
// nri-cni writes them into the plugins of a device-backed network itself.
func (o *Overlay) editDevices(conf map[string]any) error {
	k, nss, err := nadPolicyNamespaces(conf)
	if err != nil {
		return err
	}
	if o.PodResourcesSocket != "" {
		k["podResourcesSocket"] = o.PodResourcesSocket
	}
	k["deviceInfoDir"] = o.DeviceInfoDir
	o.DevicesNamespace = harness.RandomName("devices-")
	nss[o.DevicesNamespace] = map[string]any{
		"types": []string{RecorderType}, "bridges": []string{}, "masters": []string{}, "devices": []string{},
		"ipamRanges": []string{}, "paths": []string{o.RecordDir}, "hostGateway": false,
	}
	return nil
}

// removeDeviceFiles removes what editDevices' dirs hold (after the node
// root, where they are bound, is unmounted) and the recorder binary.
func (o *Overlay) removeDeviceFiles(errs *[]error) {
	for _, d := range []string{o.RecordDir, o.DeviceInfoDir} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			*errs = append(*errs, err)
		}
	}
	if o.CNIBin != "" {
		if err := os.Remove(filepath.Join(o.CNIBin, RecorderType)); err != nil && !errors.Is(err, os.ErrNotExist) {
			*errs = append(*errs, err)
		}
	}
}

func isCRIO(rt cluster.NodeRuntime) bool {
	return rt.Name() == cluster.RuntimeCRIO || strings.Contains(strings.ToLower(rt.Name()), "cri-o")
}
