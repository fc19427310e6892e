package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/hook/nri"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/reconcile"
	"github.com/nri-cni/nri-cni/state"
)

// Agent is one node's nri-cni-k8s, wired as cmd/nri-cni-k8s wires it
// (kube.go, dra.go) and started in cmd/internal/cli's order: Kubernetes
// mode (the NAD informer, the status writer and its Event broadcaster),
// the attachment engine, hot-plug's pod watcher and the DRA driver, then
// the runtime's connection (Configure, Synchronize). Left out, as they
// never call the API server: the metrics server, the netns and config
// watchers, the STATUS and CHECK loops.
type Agent struct {
	Node    *Node
	Counter *Counter
	Plugin  *nri.Plugin
	Mode    *kube.Mode
	Watcher *kube.PodWatcher
	Driver  *dra.Driver

	// NADEvents counts the NAD cache's adds, updates and deletes.
	NADEvents atomic.Int64
	// Started is when Start began; Ready when every informer had synced
	// and the runtime's resync was done (zero until then).
	Started time.Time
	ready   atomic.Pointer[time.Time]
	synced  chan struct{} // closed after the first resync
	syncing bool          // Synchronize was called: synced will close

	cancel    context.CancelFunc
	transport *http.Transport
}

// agentConfig is nri.conf for node: deploy/base's, with the node's own
// dirs, its name, and hot-plug on (its pod informer is part of the fleet).
func agentConfig(base config.Config, n *Node) (config.Config, error) {
	cfg := base
	cfg.ConfDir, cfg.BinDirs = n.confDir(), []string{"/fleet/cni"}
	cfg.StateDir, cfg.CacheDir = filepath.Join(n.Dir, "state"), filepath.Join(n.Dir, "cache")
	k := *base.Kubernetes
	k.NodeName, k.Hotplug, k.Kubeconfig = n.Name, true, ""
	if k.DRA != nil {
		d := *k.DRA
		d.KubeletDir = filepath.Join(n.Dir, "kubelet")
		k.DRA = &d
	}
	cfg.Kubernetes = &k
	if err := cfg.Validate(); err != nil {
		return config.Config{}, fmt.Errorf("nri.conf of node %s: %w", n.Name, err)
	}
	return cfg, nil
}

// StartAgent starts n's nri-cni with its node-bound token, as a new
// process would: a connection of its own, empty caches, its records read
// from n's state dir; its DRA driver publishes within limits (zero: the
// defaults). It returns once the DRA driver published (or
// failed); Ready says when the rest has synced.
func StartAgent(ctx context.Context, n *Node, admin *rest.Config, base config.Config, limits dra.PublishLimits,
	log *logrus.Entry) (_ *Agent, err error) {
	a := &Agent{Node: n, Counter: NewCounter(), Started: time.Now(), synced: make(chan struct{})}
	ctx, a.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	cfg, err := agentConfig(base, n)
	if err != nil {
		return a, err
	}
	rc, err := a.restConfig(admin, n.Token)
	if err != nil {
		return a, err
	}
	clients, err := kube.NewClientsFor(rc, n.Name)
	if err != nil {
		return a, fmt.Errorf("node %s: %w", n.Name, err)
	}
	k := cfg.Kubernetes
	policy, err := nadpolicy.New(k.NADPolicyOrDefault())
	if err != nil {
		return a, fmt.Errorf("node %s: %w", n.Name, err)
	}
	log = log.WithField("node", n.Name)
	a.Mode = kube.Start(ctx, clients, log.WithField("component", "kube"),
		kube.Options{NADPolicy: policy, MaxNADConfigBytes: k.NADConfigLimit()})
	a.Mode.Source.OnChange(func() { a.NADEvents.Add(1) })
	claims, err := state.OpenClaims(cfg.StateDir)
	if err != nil {
		return a, fmt.Errorf("node %s: DRA: %w", n.Name, err)
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return a, fmt.Errorf("node %s: %w", n.Name, err)
	}
	engine := cni.New(cni.Options{ConfDir: cfg.ConfDir, BinDirs: cfg.BinDirs, CacheDir: cfg.CacheDir, Exec: n.exec})
	if _, err := engine.Reload(ctx); err != nil {
		return a, fmt.Errorf("node %s: CNI configs: %w", n.Name, err)
	}
	mgr := attach.New(cfg, attach.Deps{Engine: engine, Netns: n.netns, Store: store, NADs: a.Mode.Source,
		Sink: a.Mode.Status, Claims: claims, Log: log, Routes: func(string, string, []net.IP) error { return nil }})
	resync := reconcile.NewResyncer(mgr, log)
	a.Plugin = nri.New(&nri.Engine{Manager: mgr, Resync: resync}, nil, log)
	a.Mode.Status.OnWritten(mgr.StatusWritten)

	a.Watcher = kube.NewPodWatcher(clients.Core, n.Name, mgr, log.WithField("component", "hotplug"), kube.PodWatchOptions{})
	resync.AfterSync(a.Watcher.ResyncAll)
	resync.AfterSync(func() { close(a.synced) })
	go a.Watcher.Run(ctx, 0)
	// The driver as nri-cni-k8s starts it, publishing without a kubelet;
	// the no-op chain has every plugin, the simulated node no interface.
	if cfg.Kubernetes.DRAOn() {
		a.Driver, err = kube.StartDRA(ctx, kube.DRANode{Config: cfg, Clients: clients, Mode: a.Mode, Claims: claims,
			Engine: mgr, Log: log.WithField("component", "dra"), PublishOnly: true, Publishing: limits,
			FindPlugin: func(string) error { return nil },
			LinkExists: func(name string) error { return fmt.Errorf("link %s: %w", name, os.ErrNotExist) }})
	}
	if err != nil {
		return a, fmt.Errorf("node %s: %w", n.Name, err)
	}

	// The runtime connects: Configure, then Synchronize with its running
	// pods (the resync runs in the background, as the plugin runs it).
	if _, err := a.Plugin.Configure(ctx, "", "containerd", "v2.4.2"); err != nil {
		return a, fmt.Errorf("node %s: Configure: %w", n.Name, err)
	}
	a.syncing = true
	if _, err := a.Plugin.Synchronize(ctx, n.Sandboxes(), nil); err != nil {
		return a, fmt.Errorf("node %s: Synchronize: %w", n.Name, err)
	}
	go a.waitReady(ctx)
	return a, nil
}

// restConfig is admin's server and CA with n's bearer token, over a
// transport of the agent's own (its own connection, as a node has; client-go
// would share one TLS transport among equal configs) that counts.
func (a *Agent) restConfig(admin *rest.Config, token string) (*rest.Config, error) {
	rc := rest.AnonymousClientConfig(admin)
	tlsCfg, err := rest.TLSConfigFor(rc)
	if err != nil {
		return nil, fmt.Errorf("node %s: TLS config: %w", a.Node.Name, err)
	}
	a.transport = utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsCfg,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext})
	rc.TLSClientConfig = rest.TLSClientConfig{}
	rc.Transport = a.Counter.Wrap(a.transport)
	rc.BearerToken = token
	return rc, nil
}

// waitReady records when the NAD and pod informers have synced, the DRA
// driver publishes and the first resync is done.
func (a *Agent) waitReady(ctx context.Context) {
	if a.Mode.Source.WaitForSync(ctx) != nil {
		return
	}
	for !a.Watcher.HasSynced() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return
	case <-a.synced:
	}
	now := time.Now()
	a.ready.Store(&now)
}

// Ready is when the agent had synced, zero if it has not.
func (a *Agent) Ready() time.Time {
	if t := a.ready.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// Idle reports whether the agent has nothing left to write.
func (a *Agent) Idle() bool { return !a.Ready().IsZero() && a.Mode.Status.Pending() == 0 }

// Stop stops the agent as a killed process stops: its requests and
// watches end, its connection closes; its state dir and the node's pods
// stay. A resync still running is waited for (it would race the next
// agent's on the same records).
func (a *Agent) Stop() {
	if a.syncing {
		select {
		case <-a.synced:
		case <-time.After(30 * time.Second):
		}
	}
	if a.cancel != nil {
		a.cancel()
	}
	if a.transport != nil {
		a.transport.CloseIdleConnections()
	}
}

// Sandbox is a pod as the NRI runtime hands it over.
func Sandbox(p PodRef) *api.PodSandbox {
	return &api.PodSandbox{Id: p.SandboxID, Name: p.Name, Namespace: p.Namespace, Uid: p.UID, Annotations: p.Annotations,
		Pid: 4242, Ips: []string{p.IP},
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: p.Netns}}}}
}
