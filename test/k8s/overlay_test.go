package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
)

// overlay is the kustomize overlay of deploy/base the tier applies, and the
// node paths it points nri-cni at.
type overlay struct {
	dir         string // kustomization.yaml and its patches
	netName     string // the example network (its name as shipped)
	bridge      string // … on this bridge (unique)
	subnet      string // … with this subnet (unique)
	metricsAddr string // --metrics-addr and the liveness probe's --addr

	// Node paths behind the DaemonSet's hostPath volumes.
	stateDir string // /var/lib/nri-cni: nri-cni's records
	cacheDir string // /var/lib/cni: libcni's cache, host-local's addresses
	cniBin   string // /opt/cni/bin: filled by the init container
	cniConf  string // /etc/cni
	nriDir   string // /var/run/nri: the node containerd's dir (its nri.sock)
	netnsDir string // /var/run/netns: where the node containerd pins pod netns

	unshare func() error // undoes the shared mount of netnsDir
}

// writeOverlay writes an overlay of deploy/base into dir/overlay that changes
// only what isolation from the host (and from other runs) needs: every
// hostPath, the netns mount's path inside the container (containerd pins
// under its state dir here, and nri-cni opens the pinned path it is given),
// the metrics port, the example network's bridge and subnet, and
// imagePullPolicy Never (the image is imported, not pulled). The pinned
// netns dir is made a shared mount so HostToContainer propagation reaches
// nri-cni, as /var/run/netns is on a node.
func writeOverlay(ctx context.Context, dir string, ctd *harness.Containerd, kubectl kubectlFunc) (o overlay, err error) {
	baseDir := filepath.Join(harness.RepoRoot(), "deploy", "base")
	b, err := renderBase(ctx, kubectl, baseDir)
	if err != nil {
		return o, err
	}
	node := filepath.Join(dir, "node")
	o = overlay{dir: filepath.Join(dir, "overlay"), bridge: harness.RandomName("nckt"), subnet: harness.RandomSubnet(180),
		stateDir: filepath.Join(node, "state"), cacheDir: filepath.Join(node, "cni-cache"),
		cniBin: filepath.Join(node, "cni-bin"), cniConf: filepath.Join(node, "cni-conf"), nriDir: ctd.Dir,
		netnsDir: filepath.Join(ctd.Dir, "state", "io.containerd.grpc.v1.cri", "netns")}
	port, err := freePort()
	if err != nil {
		return o, err
	}
	o.metricsAddr = "127.0.0.1:" + strconv.Itoa(port)
	var keys []string
	for k := range b.cm.Data {
		if k != deploy.ConfigKey {
			keys = append(keys, k)
		}
	}
	if len(keys) != 1 {
		return o, fmt.Errorf("deploy/base: want one example network in the ConfigMap, have %v", keys)
	}
	conflist, err := rewriteBridge(b.cm.Data[keys[0]], o.bridge, o.subnet)
	if err != nil {
		return o, fmt.Errorf("deploy/base ConfigMap %s: %w", keys[0], err)
	}
	o.netName = conflist.name
	dsOps, err := daemonSetOps(b, o)
	if err != nil {
		return o, err
	}
	cmOps := []jsonOp{{Op: "replace", Path: "/data/" + pointerEscape(keys[0]), Value: conflist.text}}
	for _, d := range []string{o.dir, o.stateDir, o.cacheDir, o.cniBin, o.cniConf, o.netnsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return o, fmt.Errorf("overlay: %w", err)
		}
	}
	base, err := filepath.Rel(o.dir, baseDir)
	if err != nil {
		return o, fmt.Errorf("overlay: %w", err)
	}
	kust := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
		"resources": []string{base},
		"patches": []map[string]any{
			{"path": "daemonset.json", "target": map[string]string{"kind": "DaemonSet", "name": b.ds.Name}},
			{"path": "configmap.json", "target": map[string]string{"kind": "ConfigMap", "name": b.cm.Name}},
		},
	}
	if err := writeYAML(filepath.Join(o.dir, "kustomization.yaml"), kust); err != nil {
		return o, err
	}
	if err := writeYAML(filepath.Join(o.dir, "daemonset.json"), dsOps); err != nil {
		return o, err
	}
	if err := writeYAML(filepath.Join(o.dir, "configmap.json"), cmOps); err != nil {
		return o, err
	}
	if o.unshare, err = deploy.ShareMount(o.netnsDir); err != nil {
		return o, err
	}
	return o, nil
}

// jsonOp is one RFC 6902 operation.
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// daemonSetOps are the DaemonSet's patches, addressed by the indexes the
// shipped manifest has (found by name, so a reordered base still works).
func daemonSetOps(b rendered, o overlay) ([]jsonOp, error) {
	const spec = "/spec/template/spec"
	var ops []jsonOp
	ps := b.ds.Spec.Template.Spec
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
			return nil, fmt.Errorf("deploy/base: %s has no --metrics-addr", c.Name)
		}
		ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/args/%d", p, j), o.metricsAddr})
		if c.LivenessProbe == nil || c.LivenessProbe.Exec == nil {
			return nil, fmt.Errorf("deploy/base: %s has no exec liveness probe", c.Name)
		}
		if j := flagValue(c.LivenessProbe.Exec.Command, "--addr"); j >= 0 {
			ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/livenessProbe/exec/command/%d", p, j), o.metricsAddr})
		}
		for k, m := range c.VolumeMounts {
			if m.MountPath == "/var/run/netns" {
				ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/volumeMounts/%d/mountPath", p, k), o.netnsDir})
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("deploy/base: no container %s", deploy.ContainerName)
	}
	hostPaths := map[string]string{
		"/var/run/nri": o.nriDir, "/var/run/netns": o.netnsDir, "/opt/cni/bin": o.cniBin,
		"/etc/cni": o.cniConf, "/var/lib/cni": o.cacheDir, "/var/lib/nri-cni": o.stateDir,
	}
	for i, v := range ps.Volumes {
		if v.HostPath == nil {
			continue
		}
		to, ok := hostPaths[v.HostPath.Path]
		if !ok {
			return nil, fmt.Errorf("deploy/base: hostPath %s (volume %s) has no private stand-in", v.HostPath.Path, v.Name)
		}
		ops = append(ops, jsonOp{"replace", fmt.Sprintf("%s/volumes/%d/hostPath/path", spec, i), to})
	}
	return ops, nil
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

func writeYAML(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err == nil && strings.HasSuffix(path, ".yaml") {
		data, err = yaml.JSONToYAML(data)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
