// Package attach is the attachment engine: for one sandbox at a time it
// plans (package plan), records the intent, ADDs, rolls back what a failure
// left, DELs, and keeps the records — under per-sandbox locks, inside the
// runtime's deadline. The runtime adapters (hook/nri, hook/oci) and the
// reconcilers (reconcile) drive it; it talks to CNI (cni), namespaces
// (netns) and records (state) below it.
//
// Contract, per sandbox id:
//   - Attach is idempotent: a sandbox already attached is not attached again
//     (no second IP). A failed Attach rolls back every ADD it ran, the failed
//     one included, on a fresh bounded context.
//   - Detach never fails for "already gone"; a DEL that really fails keeps the
//     record so a later event (or GC) retries. Every ADD eventually gets a DEL.
//   - Operations on one id are serialised; different ids run in parallel.
//     Locking rule: exported methods take the locks, unexported ones never do.
package attach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// DefaultMargin is kept back from the runtime's request deadline for
// answering it, so a slow CNI chain fails with our error, not the runtime's
// timeout (which makes containerd drop the plugin).
const DefaultMargin = 250 * time.Millisecond

// NetnsResolver resolves and checks network namespaces (netns.Resolver).
type NetnsResolver interface {
	Resolve(pid uint32, pinned string) (netns.Netns, error)
	ResolveRunning(pid uint32, pinned string) (netns.Netns, error)
	Check(path string) (netns.Netns, error)
	// Links lists the interface names in the namespace at path.
	Links(path string) ([]string, error)
	// Hold keeps the namespace at path (which must still be want) alive
	// until Release, under a path a plugin can enter after the runtime
	// removed the pin (a teardown going on past StopPodSandbox).
	Hold(path string, want netns.ID) (*netns.Held, error)
}

// Sandbox is what an event tells about the thing to attach.
type Sandbox struct {
	ID     string // sandbox id (NRI) or container id (OCI hook): CNI_CONTAINERID
	Kind   string // "pod" or "container"
	Pod    cni.PodIdentity
	Pid    uint32
	Pinned string // the runtime's pinned netns path, if any
	// Annotations of the pod (or container): network selection and
	// capability args.
	Annotations map[string]string
	// IPs are the runtime's own network's addresses (NRI pod Ips), for the
	// default entry of the network-status.
	IPs []string
	// Labels of the pod as the runtime has them (the CRI sandbox's, less
	// the kubelet's io.kubernetes.pod.* keys): what MultiNetworkPolicy
	// selects the pod by until the API's copy is in kube's cache.
	Labels map[string]string
}

// ClaimSource says which prepared DRA claim devices a pod has (memory only:
// it is read inside the runtime's request).
type ClaimSource interface {
	ForPod(podUID string) []state.ClaimDevice
}

// Observer is told about every CNI operation (metrics).
type Observer interface {
	Op(op, network, result string, d time.Duration)
}

// Deps are what a Manager works with.
type Deps struct {
	Engine CNI
	Netns  NetnsResolver
	Store  Records
	// NADs resolves NetworkAttachmentDefinitions (Kubernetes mode); nil
	// without it.
	NADs plan.NADSource
	// Multus says which config makes Multus the node's primary network
	// ("" when it is not); nil means never. While it is, Multus owns the
	// NPWG annotation and network-status.
	Multus func() string
	// Sink receives pods' network status and failures; nil reports nothing.
	Sink StatusSink
	// Claims are the DRA claims prepared on this node (the DRA driver's
	// records); nil without DRA.
	Claims ClaimSource
	// Devices answers which devices the kubelet allocated to a pod, for
	// networks of a device plugin resource; nil: such networks fail.
	Devices DeviceSource
	// DeviceInfo keeps the NPWG device-info files of those networks; nil:
	// none written or read.
	DeviceInfo DeviceInfoFiles
	// Routes moves a pod's default routes (nil: netns.SetDefaultRoutes; a
	// seam for tests whose namespaces are not real).
	Routes func(path, ifname string, gateways []net.IP) error
	// Policy and Firewall enforce MultiNetworkPolicy on the interfaces
	// nri-cni attaches (policy.go); both nil (the default): off, no
	// render and no netlink. Both are needed: one alone is off too.
	Policy   PolicySource
	Firewall Firewall
	// LinksUp sets interfaces of a pod's netns up or down (a policy
	// quarantine); nil: netns.SetLinksUp (a seam for tests whose
	// namespaces are not real).
	LinksUp func(path string, ifnames []string, up bool) error
	// Log may be nil (discarded).
	Log *logrus.Entry
}

// Manager attaches and detaches CNI networks for sandboxes.
type Manager struct {
	cfg     config.Config
	planner *plan.Planner
	ready   *plan.Readiness
	ns      NetnsResolver
	store   Records
	log     *logrus.Entry
	margin  time.Duration
	locks   *locks
	cni     *ops
	report  *reporter
	routes  func(path, ifname string, gateways []net.IP) error
	claims  ClaimSource // nil: no DRA
	// retries are the teardowns that failed, retried with backoff.
	retries retries
	// live: the pod sandboxes the runtime runs, for hot-plug.
	live liveSandboxes
	// onNetns, if set, learns each recorded netns path (the netns watcher).
	onNetns func(path string)
	// bg: the background attaches in flight (backgroundAttach).
	bg *Background
	// checks: the drift CHECKs in flight, which a teardown cancels.
	checks runningChecks
	// pol: MultiNetworkPolicy (policy.go); nil when off.
	pol *policies
}

// New wires a Manager.
func New(cfg config.Config, d Deps) *Manager {
	log := d.Log
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = logrus.NewEntry(l)
	}
	ready := &plan.Readiness{}
	planner := plan.New(cfg, plan.Catalogue{Local: d.Engine.Networks, NADs: d.NADs, NotReady: ready.NotReady,
		MultusPrimary: d.Multus})
	m := &Manager{cfg: cfg, planner: planner, ready: ready, ns: d.Netns, store: d.Store, log: log,
		margin: DefaultMargin, locks: newLocks(), routes: d.Routes, claims: d.Claims, pol: newPolicies(d)}
	if m.routes == nil {
		m.routes = netns.SetDefaultRoutes
	}
	if m.pol != nil {
		m.pol.m = m
	}
	m.bg = newBackground(m)
	m.cni = &ops{cfg: cfg, engine: d.Engine, planner: planner, ns: d.Netns, store: d.Store, log: log, margin: DefaultMargin,
		devs: devices{src: d.Devices, files: d.DeviceInfo}}
	m.report = &reporter{cfg: cfg, sink: d.Sink, planner: planner}
	return m
}

// Built is a Manager with the engine and record store Build made for it:
// what the binary wires beyond the Manager (the config watcher, the
// process lock).
type Built struct {
	*Manager
	Engine *cni.Engine
	Store  *state.Store
	// Skipped names each invalid config file.
	Skipped []error
}

// Build wires a Manager from a config: the state dir, the host-netns
// resolver and the CNI engine with the configs loaded (validated against the
// plugin binaries unless noValidate). d's Engine, Netns and Store are set
// here.
func Build(ctx context.Context, cfg config.Config, noValidate bool, d Deps) (*Built, error) {
	if cni.PluginRootOn(cfg.PluginRoot) {
		// Every plugin would fail to start: say why once, at start.
		fi, err := os.Stat(cfg.PluginRoot)
		if err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			return nil, fmt.Errorf("pluginRoot (where the host's / is mounted): %w", err)
		}
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	resolver, err := netns.NewResolver()
	if err != nil {
		return nil, err
	}
	engine := cni.New(cni.Options{ConfDir: cfg.ConfDir, BinDirs: cfg.BinDirs, CacheDir: cfg.CacheDir, NoValidate: noValidate,
		PluginRoot: cfg.PluginRoot})
	skipped, err := engine.Reload(ctx)
	if err != nil {
		return nil, err
	}
	d.Engine, d.Netns, d.Store = engine, resolver, store
	return &Built{Manager: New(cfg, d), Engine: engine, Store: store, Skipped: skipped}, nil
}

// Config returns the configuration.
func (m *Manager) Config() config.Config { return m.cfg }

// Record is sandbox or container id's record (state.ErrNotFound: none).
func (m *Manager) Record(id string) (*state.Record, error) { return m.store.Get(id) }

// Records lists every readable record and one error per unreadable file
// (state.Store.List): what the reconcilers walk.
func (m *Manager) Records() ([]*state.Record, []error) { return m.store.List() }

// Networks are the config dir's networks as loaded now.
func (m *Manager) Networks() []*cni.Network { return m.cni.engine.Networks() }

// FindPlugin finds a plugin's binary as ADD will (inside pluginRoot).
func (m *Manager) FindPlugin(typ string) (string, error) { return m.cni.engine.FindPlugin(typ) }

// NetworkStatus runs CNI STATUS of n (a NAD's network; those of the config
// dir have the readiness reconciler's answer, NotReady).
func (m *Manager) NetworkStatus(ctx context.Context, n *cni.Network) error {
	return m.cni.engine.Status(ctx, n)
}

// NotReady is the last CNI STATUS answer for the config dir's network
// (nil: ready, or not asked yet).
func (m *Manager) NotReady(network string) error { return m.ready.NotReady(network) }

// CheckClaim says whether a prepared claim's device still plans (its
// network exists and is allowed): what the DRA driver checks at prepare.
func (m *Manager) CheckClaim(d state.ClaimDevice) error { return m.planner.CheckClaim(d) }

// SetObserver installs o (metrics); call it before events are served.
func (m *Manager) SetObserver(o Observer) { m.cni.obs = o }

// OnNetns registers f to learn every netns path recorded from now on (the
// netns watcher); call it before events are served.
func (m *Manager) OnNetns(f func(path string)) { m.onNetns = f }

// PendingTeardowns is the number of sandboxes whose teardown failed and is
// being retried.
func (m *Manager) PendingTeardowns() int { return m.retries.count() }

// Live returns the latest sandbox the runtime runs for a pod UID (hot-plug:
// only with kubernetes.hotplug).
func (m *Manager) Live(uid string) (Sandbox, bool) { return m.live.get(uid) }

// SetLive keeps exactly the listed sandboxes as the runtime's live ones
// (a resync), with hot-plug on.
func (m *Manager) SetLive(list []Sandbox) {
	if m.hotplug() {
		m.live.replace(list)
	}
}

func (m *Manager) hotplug() bool { return m.cfg.Kubernetes.HotplugOn() }

// pod is what planning knows of sb: its namespace, annotations and, for a
// pod sandbox, the devices of its prepared DRA claims.
func (m *Manager) pod(sb Sandbox) plan.Pod {
	p := plan.Pod{Namespace: sb.Pod.Namespace, Annotations: sb.Annotations}
	if m.claims != nil && sb.Kind == "pod" && sb.Pod.UID != "" {
		p.Claims = m.claims.ForPod(sb.Pod.UID)
	}
	return p
}

// recorded is the record entry of a planned attachment.
func recorded(a plan.Attachment) state.Network {
	n := state.Network{Name: a.Network.Name, IfName: a.IfName, NAD: a.NAD, Claim: a.Claim, Default: a.Default,
		Resource: a.Network.ResourceName, DeviceID: a.DeviceID}
	if len(a.Caps) > 0 {
		n.Caps = a.Caps
	}
	return n
}

func (m *Manager) noteNetns(path string) {
	if m.onNetns != nil && path != "" {
		m.onNetns(path)
	}
}

func (m *Manager) logFor(sb Sandbox) *logrus.Entry {
	return m.log.WithFields(logrus.Fields{"sandbox": sb.ID, "pod": sb.Pod.Name, "namespace": sb.Pod.Namespace})
}

// Hold takes the sandbox's lock as an operation on it would (the GC lock
// shared, then id's), waiting until ctx's deadline less the margin: a test
// or a tool holding a sandbox busy on purpose. release unlocks it.
func (m *Manager) Hold(ctx context.Context, id string) (release func(), err error) {
	return m.locks.sandbox(ctx, id, 0, m.margin)
}

// HoldGC takes the GC lock exclusively, as libcni's GC does, within wait;
// nil when it did not come.
func (m *Manager) HoldGC(ctx context.Context, wait time.Duration) (release func()) {
	return m.locks.exclusive(ctx, wait)
}

// LocksHeld is how many sandboxes are locked or waited for.
func (m *Manager) LocksHeld() int { return m.locks.keyed.size() }

// Margin is what is kept back from the runtime's request deadline.
func (m *Manager) Margin() time.Duration { return m.margin }

// Background is m's background attacher (backgroundAttach: background.go).
func (m *Manager) Background() *Background { return m.bg }
