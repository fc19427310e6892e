package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nri-cni/nri-cni/test/harness"
)

// Opts configures a cluster. The zero value works (as root).
type Opts struct {
	// Dir is the cluster's private directory; "" = a new one under the temp
	// dir (removed by Close). Keep it short: unix socket paths live there.
	Dir string
	// NodeName; "" = "node-" + 8 random hex characters.
	NodeName string
	// Tools and RuntimeTools: zero values = the installers' output
	// (test/tools/install-k8s.sh, test/tools/install.sh).
	Tools        Tools
	RuntimeTools harness.Tools
	// PauseTar is the offline pause image tar; "" = built into Dir.
	PauseTar string
	// PluginRequestTimeout is the runtime's NRI plugin request timeout.
	PluginRequestTimeout time.Duration
	// Runtime is the node's container runtime: RuntimeContainerd (the
	// default, "") or RuntimeCRIO.
	Runtime string
	// Audit turns on the API server's audit log (every request, Metadata
	// level) at Cluster.AuditLog.
	Audit bool
	// EditKubeletConfig may change the KubeletConfiguration (a YAML map)
	// before the kubelet starts.
	EditKubeletConfig func(map[string]any)
	// Logf, when set, receives Start's phases with their times.
	Logf func(format string, args ...any)
}

// Cluster is a running single-node Kubernetes.
type Cluster struct {
	Dir            string
	NodeName       string
	NodeIP         net.IP // on the dummy interface Link
	Link           string
	APIServerURL   string
	Kubeconfig     string // admin (system:masters)
	KubeletRootDir string
	PodLogsDir     string
	AuditLog       string // "" unless Opts.Audit
	Tools          Tools
	Client         *kubernetes.Clientset
	RESTConfig     *rest.Config
	// The node's runtime: one of Containerd and CRIO is set (Runtime()
	// is either, for what does not depend on which).
	Containerd *harness.Containerd
	CRIO       *harness.CRIO

	id          string // in the host registry (shared.go)
	joined      bool
	closed      bool
	removeDir   bool
	host        *hostState
	rtTools     harness.Tools
	pki         *pki
	apiPort     int
	kubeletPort int

	etcd, apiserver, controllerManager, scheduler, kubelet *proc
	api                                                    apiChoice // StartAPIOnly's
}

// Start brings up etcd, the API server, controller-manager, scheduler,
// the node's runtime (containerd or CRI-O, with NRI, the seccomp runc and
// the pause image) and the kubelet; it returns once the node is Ready and
// namespace default has its service account. On error everything started is
// undone.
func Start(ctx context.Context, o Opts) (c *Cluster, err error) {
	c = &Cluster{Dir: o.Dir, NodeName: o.NodeName, Tools: o.Tools}
	t0 := time.Now()
	phase := func(what string) {
		if o.Logf != nil {
			o.Logf("cluster: %-32s %6.2fs", what, time.Since(t0).Seconds())
		}
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "k8s"); err != nil {
			return nil, fmt.Errorf("cluster dir: %w", err)
		}
		c.removeDir = true
	}
	if c.NodeName == "" {
		c.NodeName = harness.RandomName("node-")
	}
	c.KubeletRootDir = filepath.Join(c.Dir, "kubelet")
	c.PodLogsDir = filepath.Join(c.Dir, "pod-logs")
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close(context.WithoutCancel(ctx)))
			c = nil
		}
	}()
	if err := c.tools(ctx, &o); err != nil {
		return c, err
	}
	c.id, c.Link, c.host = harness.RandomName("cluster-"), harness.RandomName("k8sn"), &hostState{}
	cgroupRoot := "/" + harness.RandomName("nricni-")
	reg := user{Dir: c.Dir, RemoveDir: c.removeDir, Link: c.Link, CgroupRoot: cgroupRoot}
	if err := joinHost(c.id, reg); err != nil {
		return c, err
	}
	c.joined = true
	if c.NodeIP, err = c.host.addDummy(c.Link); err != nil {
		return c, err
	}
	if err := c.host.makeCgroupRoot(cgroupRoot); err != nil {
		return c, err
	}
	procs, err := c.prepareControlPlane(o.Audit)
	if err != nil {
		return c, err
	}
	phase("tools, node interface, cgroups, PKI")
	c.etcd, c.apiserver, c.controllerManager, c.scheduler = procs[0], procs[1], procs[2], procs[3]
	c.rtTools = o.RuntimeTools
	ctdDone := make(chan error, 1)
	go func() { err := c.startRuntime(ctx, o); phase("runtime up, pause image in"); ctdDone <- err }()
	for _, p := range procs[:2] {
		if err := p.start(); err != nil {
			return c, errors.Join(err, <-ctdDone)
		}
	}
	if err := c.waitAPIServer(ctx, 2*time.Minute, c.etcd, c.apiserver); err != nil {
		return c, errors.Join(err, <-ctdDone)
	}
	phase("etcd and kube-apiserver ready")
	for _, p := range procs[2:] {
		if err := p.start(); err != nil {
			return c, errors.Join(err, <-ctdDone)
		}
	}
	if err := <-ctdDone; err != nil {
		return c, err
	}
	if err := c.writeKubelet(o.EditKubeletConfig); err != nil {
		return c, err
	}
	since := time.Now()
	if err := c.kubelet.start(); err != nil {
		return c, err
	}
	phase("kubelet started")
	if err := c.waitNodeReady(ctx, since, 3*time.Minute); err != nil {
		return c, err
	}
	phase("node Ready")
	err = c.waitDefaultServiceAccount(ctx, 2*time.Minute)
	phase("default service account")
	return c, err
}

// prepareControlPlane picks the API server's port, issues the PKI, builds
// the admin client and prepares etcd, kube-apiserver, controller-manager and
// scheduler (not started).
func (c *Cluster) prepareControlPlane(audit bool) ([]*proc, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	c.apiPort = ports[0]
	c.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(c.apiPort)
	cs, err := c.makePKI()
	if err != nil {
		return nil, err
	}
	if err := c.newClient(); err != nil {
		return nil, err
	}
	return c.controlPlaneProcs(cs, audit)
}

// tools fills in the tool dirs the options left empty (running the installers).
func (c *Cluster) tools(ctx context.Context, o *Opts) error {
	var err error
	if c.Tools.K8sDir == "" {
		if c.Tools, err = EnsureTools(ctx); err != nil {
			return err
		}
	}
	if o.RuntimeTools.ContainerdDir == "" {
		if o.RuntimeTools, err = harness.EnsureTools(); err != nil {
			return err
		}
	}
	return nil
}

// Kubectl runs the pinned kubectl as the admin and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Tools.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = append(procEnv, "HOME="+c.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %v: %w\n%s", args, err, out)
	}
	return string(out), nil
}

// CrictlConfig is the crictl config file pointing at the node's runtime.
func (c *Cluster) CrictlConfig() string { return filepath.Join(c.Dir, "crictl.yaml") }

// Crictl runs the pinned crictl against the node's runtime.
func (c *Cluster) Crictl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.Tools.bin("crictl"), append([]string{"--config", c.CrictlConfig()}, args...)...)
	cmd.Env = procEnv
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("crictl %v: %w\n%s", args, err, out)
	}
	return string(out), nil
}

// Pids are the pids of the running components by name (the runtime too,
// as "containerd" or "crio").
func (c *Cluster) Pids() map[string]int {
	m := map[string]int{}
	for _, p := range c.procs() {
		if pid := p.pid(); pid > 0 {
			m[p.name] = pid
		}
	}
	if rt := c.Runtime(); rt != nil {
		m[rt.Name()] = rt.Pid()
	}
	return m
}

// RSS is the resident set size, in KiB, of each running component.
func (c *Cluster) RSS() map[string]int {
	m := map[string]int{}
	for name, pid := range c.Pids() {
		m[name] = RSSKiB(pid)
	}
	return m
}

func (c *Cluster) procs() []*proc {
	var ps []*proc
	for _, p := range []*proc{c.kubelet, c.controllerManager, c.scheduler, c.apiserver, c.etcd} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// Close stops everything in order (kubelet → pods and the runtime →
// controller-manager and scheduler → API server → etcd), then undoes what the
// kubelet changed on the host: its root dir's mounts, the pod cgroups and the
// cgroup root, its /var/log/containers links and the node interface; the last
// cluster on the host to close also restores the kernel tunables, removes
// /var/log/containers and /var/lib/kubelet/device-plugins if no cluster had
// found them, and KUBE-* iptables chains that appeared (shared.go). The
// cluster dir is removed when Start made it.
func (c *Cluster) Close(ctx context.Context) error {
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	if c.kubelet != nil {
		c.kubelet.stop(30 * time.Second)
	}
	if err := c.closeRuntime(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, p := range []*proc{c.controllerManager, c.scheduler, c.apiserver, c.etcd} {
		if p != nil {
			p.stop(15 * time.Second)
		}
	}
	// The kubelet root dir (an rshared bind mount of itself, pod volumes) and
	// whatever else is mounted in the cluster dir.
	if c.Dir != "" {
		if err := harness.UnmountUnder(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("cluster mounts: %w", err))
		}
	}
	removeVarLogLinks(c.PodLogsDir)
	if h := c.host; h != nil {
		if err := h.removeCgroups(); err != nil {
			errs = append(errs, err)
		}
		if err := h.delDummy(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.joined {
		if err := leaveHost(c.id); err != nil {
			errs = append(errs, err)
		}
	}
	if c.removeDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.Dir, err))
		}
	}
	return errors.Join(errs...)
}
