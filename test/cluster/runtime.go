package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nri-cni/nri-cni/deploy/node"
	"github.com/nri-cni/nri-cni/test/harness"
)

// The node runtimes Opts.Runtime names.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "crio"
)

// NodeRuntime is the node's container runtime as the tests use it: the
// harness's Runtime (CRI and NRI sockets, restart, log) plus its pid and
// where it pins pod network namespaces.
type NodeRuntime interface {
	harness.Runtime
	Pid() int
	NetnsDir() string
	// ConfigFile and ConfDir are the runtime's main config and the drop-ins
	// it reads after it (as /etc/containerd/config.toml and conf.d, or
	// /etc/crio/crio.conf and crio.conf.d, on a node).
	ConfigFile() string
	ConfDir() string
}

var (
	_ NodeRuntime = (*harness.Containerd)(nil)
	_ NodeRuntime = (*harness.CRIO)(nil)
)

// Runtime is the node's runtime (containerd or CRI-O; nil before it started).
func (c *Cluster) Runtime() NodeRuntime {
	switch {
	case c.Containerd != nil:
		return c.Containerd
	case c.CRIO != nil:
		return c.CRIO
	}
	return nil // not a typed nil: callers compare with nil
}

// PrimaryBridge is the bridge of the runtime's own (primary, eth0) network.
func (c *Cluster) PrimaryBridge() string {
	switch {
	case c.Containerd != nil:
		return c.Containerd.PrimaryBridge
	case c.CRIO != nil:
		return c.CRIO.PrimaryBridge
	}
	return ""
}

// RestartRuntime restarts the node's runtime (SIGTERM by pid, then started
// with the same config); pods keep running.
func (c *Cluster) RestartRuntime(ctx context.Context) error {
	rt := c.Runtime()
	if rt == nil {
		return errors.New("restarting the node's runtime: none running")
	}
	return rt.Restart(ctx)
}

// LoadImage puts an image archive (docker-archive tar) into the node
// runtime's image store: containerd's k8s.io namespace (ctr import), or
// CRI-O's storage (podman load).
func (c *Cluster) LoadImage(ctx context.Context, tar string) error {
	switch {
	case c.Containerd != nil:
		return harness.ImportImage(ctx, filepath.Join(c.rtTools.ContainerdDir, "ctr"), c.Containerd.Address, tar)
	case c.CRIO != nil:
		return c.CRIO.LoadImage(ctx, tar)
	}
	return fmt.Errorf("loading %s: no node runtime running", tar)
}

// startRuntime starts the runtime Opts.Runtime names with the seccomp runc
// (the kubelet asks RuntimeDefault for every container) and the offline
// pause image, and writes the crictl config pointing at it.
func (c *Cluster) startRuntime(ctx context.Context, o Opts) error {
	tar := o.PauseTar
	if tar == "" {
		tar = filepath.Join(c.Dir, "pause.tar")
		if err := harness.BuildPauseImageTar(ctx, filepath.Join(c.Dir, "pause-build"), tar); err != nil {
			return err
		}
	}
	switch o.Runtime {
	case "", RuntimeContainerd:
		if err := c.startContainerd(ctx, o, tar); err != nil {
			return err
		}
	case RuntimeCRIO:
		if err := c.startCRIO(ctx, o, tar); err != nil {
			return err
		}
	default:
		return fmt.Errorf("cluster: unknown runtime %q (want %q or %q)", o.Runtime, RuntimeContainerd, RuntimeCRIO)
	}
	ep := "unix://" + c.Runtime().CRIAddress()
	crictl := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 30\n", ep, ep)
	if err := os.WriteFile(c.CrictlConfig(), []byte(crictl), 0o644); err != nil {
		return fmt.Errorf("crictl config: %w", err)
	}
	return nil
}

// startContainerd starts the harness containerd, configured as a node that
// `nri-cni node-setup` set up (it imports the product's drop-in from the
// repository: NRI's default validator on; the harness's private socket and
// timeouts stay), and imports the pause image.
func (c *Cluster) startContainerd(ctx context.Context, o Opts, pauseTar string) error {
	ctd, err := harness.StartContainerd(ctx, harness.ContainerdOpts{
		Dir: filepath.Join(c.Dir, "ctd"), Tools: o.RuntimeTools, PluginRequestTimeout: o.PluginRequestTimeout,
		RuncBinary: c.Tools.bin("runc"),
		DropIns:    []string{filepath.Join(harness.RepoRoot(), node.ContainerdDropInRepoPath)},
	})
	if err != nil {
		return err
	}
	c.Containerd = ctd
	return harness.ImportImage(ctx, filepath.Join(o.RuntimeTools.ContainerdDir, "ctr"), ctd.Address, pauseTar)
}

// startCRIO starts the harness CRI-O (cgroupfs like the kubelet, the
// monitor cgroup "pod", and the runc wrapper of harness/crio_wrapper.go for
// what this host cannot do: negative oomScoreAdj, capabilities outside its
// bounding set, hugetlb limits without a v1 hugetlb hierarchy) set up as a
// kubelet's node runs it: the infra container dropped (CRI-O's default, so
// NRI gets Pid 0 at RunPodSandbox), and its NRI socket alone in a
// directory, which the DaemonSet mounts: a private rbind of CRI-O's whole
// dir would copy its storage and the pods' pinned netns into nri-cni's
// mount namespace, where a removed pod's netns would stay mounted. CRI-O
// loads the pause image into its storage itself. Like a node that `nri-cni
// node-setup` set up, it reads the product's drop-in (NRI's default
// validator on).
func (c *Cluster) startCRIO(ctx context.Context, o Opts, pauseTar string) error {
	// Short: conmon's attach sockets are <dir>/attach/<64-hex id>/attach.
	dir := filepath.Join(c.Dir, "crio")
	crio, err := harness.StartCRIO(ctx, harness.CRIOOpts{
		Dir: dir, Tools: o.RuntimeTools, CRIOBinDir: o.RuntimeTools.CRIODir, DropInfra: true,
		PluginRequestTimeout: o.PluginRequestTimeout, PauseTar: pauseTar,
		NRISocket: filepath.Join(dir, "nri", "nri.sock"), RuncBinary: c.Tools.bin("runc"),
		DropIns: []string{filepath.Join(harness.RepoRoot(), node.CRIODropInRepoPath)},
	})
	if err != nil {
		return err
	}
	c.CRIO = crio
	return nil
}

// RestartContainerd restarts the node's containerd (pods keep running); an
// error on a CRI-O node (RestartRuntime restarts either).
func (c *Cluster) RestartContainerd(ctx context.Context) error {
	if c.Containerd == nil {
		return fmt.Errorf("RestartContainerd: the node runs %s, not containerd (use RestartRuntime)", c.runtimeName())
	}
	return c.Containerd.Restart(ctx)
}

func (c *Cluster) runtimeName() string {
	if rt := c.Runtime(); rt != nil {
		return rt.Name()
	}
	return "no runtime"
}

// closeRuntime removes every pod and stops the runtime, leaving none of its
// processes, mounts or primary bridge (the pod cgroups under the cluster's
// cgroup root are removed with it, in Close). CRI-O's leftovers are checked
// here, while its log (which names every container it made) still exists:
// processes, mounts, pinned namespaces, cgroups outside the cgroup root,
// its entries in /var/lib/cni/results, the bridge.
func (c *Cluster) closeRuntime(ctx context.Context) error {
	rt := c.Runtime()
	if rt == nil {
		return nil
	}
	if err := rt.Close(ctx); err != nil {
		return fmt.Errorf("%s: %w", rt.Name(), err)
	}
	if c.CRIO != nil {
		if left := c.CRIO.Leftovers(); len(left) > 0 {
			return fmt.Errorf("crio: left behind after Close: %v", left)
		}
	}
	return nil
}
