// Package hook binds CNI attachments to sandbox lifecycle events. The Manager
// is the one data path (event → netns → CNI → state) shared by the NRI plugin
// and the OCI hook; the files nri.go and (later) oci.go only translate events.
//
// Contract, per sandbox id:
//   - Attach is idempotent: a sandbox already attached is not attached again
//     (no second IP). A failed Attach rolls back every ADD it ran, the failed
//     one included, on a fresh bounded context.
//   - Detach never fails for "already gone"; a DEL that really fails keeps the
//     record so a later event (or GC) retries. Every ADD eventually gets a DEL.
//   - Operations on one id are serialised; different ids run in parallel.
//     Locking rule: public methods take the locks, private ones never do.
package hook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netns"
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
}

// Manager attaches and detaches CNI networks for sandboxes.
type Manager struct {
	cfg    config.Config
	engine *cni.Engine
	ns     NetnsResolver
	store  *state.Store
	log    *logrus.Entry
	margin time.Duration

	// gcMu is taken before any per-id lock: shared by Attach/Detach,
	// exclusive for GC, so GC never overlaps an ADD or DEL.
	gcMu  sync.RWMutex
	locks *keyedLocks
	// retries are the teardowns that failed, retried with backoff.
	retries retries

	// onNetns, if set, learns each recorded netns path (the netns watcher).
	onNetns func(path string)
	// obs, if set, is told about every CNI operation (metrics).
	obs Observer
	// autoIfname matches the interface names nri-cni assigns itself.
	autoIfname *regexp.Regexp
	// podCaps: the capability annotations pods may use (cfg.PodCapabilities,
	// computed once).
	podCaps podCapabilities

	// source and sink: Kubernetes mode (kubernetes.go); nil without it.
	source NetworkSource
	sink   StatusSink
	multus func() string // WithMultusCheck
	// routes moves the pod's default routes (netns.SetDefaultRoutes; a
	// seam for the unit tests, whose namespaces are not real).
	routes func(path, ifname string, gateways []net.IP) error
	// live: the pod sandboxes the runtime runs, for hot-plug (hotplug.go).
	live liveSandboxes
	// ready: each network's last CNI STATUS (readiness.go).
	ready readiness
}

// Observer is told about every CNI operation.
type Observer interface {
	Op(op, network, result string, d time.Duration)
}

// SetObserver installs o; call it before events are served.
func (m *Manager) SetObserver(o Observer) { m.obs = o }

func (m *Manager) observe(op, network string, err error, d time.Duration) {
	if m.obs == nil {
		return
	}
	network = m.metricsLabel(network)
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.obs.Op(op, network, result, d)
}

// MetricsNADLabel is the network label of every network that is not one
// of confDir's: NetworkAttachmentDefinitions name theirs, and a label per
// tenant-chosen name would let tenants grow the metrics without bound.
const MetricsNADLabel = "nad"

// metricsLabel is network's metrics label: its name if confDir loads it.
func (m *Manager) metricsLabel(network string) string {
	for _, n := range m.engine.Networks() {
		if n.Name == network {
			return network
		}
	}
	return MetricsNADLabel
}

func (m *Manager) noteNetns(path string) {
	if m.onNetns != nil && path != "" {
		m.onNetns(path)
	}
}

// NewManager wires a Manager. log may be nil (discarded).
func NewManager(cfg config.Config, engine *cni.Engine, ns NetnsResolver, store *state.Store, log *logrus.Entry, opts ...Option) *Manager {
	if log == nil {
		l := logrus.New()
		l.SetOutput(discard{})
		log = logrus.NewEntry(l)
	}
	m := &Manager{cfg: cfg, engine: engine, ns: ns, store: store, log: log, margin: DefaultMargin, locks: newKeyedLocks(),
		autoIfname: regexp.MustCompile("^" + regexp.QuoteMeta(cfg.IfnamePrefix) + "[0-9]+$"),
		podCaps:    newPodCapabilities(cfg.PodCapabilities), routes: netns.SetDefaultRoutes}
	for _, o := range opts {
		o(m)
	}
	return m
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Config returns the configuration.
func (m *Manager) Config() config.Config { return m.cfg }

// Store returns the record store.
func (m *Manager) Store() *state.Store { return m.store }

// Engine returns the CNI engine.
func (m *Manager) Engine() *cni.Engine { return m.engine }

func (m *Manager) logFor(sb Sandbox) *logrus.Entry {
	return m.log.WithFields(logrus.Fields{"sandbox": sb.ID, "pod": sb.Pod.Name, "namespace": sb.Pod.Namespace})
}

// Attach ADDs the configured networks to the sandbox and records them.
func (m *Manager) Attach(ctx context.Context, sb Sandbox) (*state.Record, error) {
	return m.attach(ctx, sb, false)
}

// ErrKnown: AttachIfAbsent found a record (any phase) and did nothing.
var ErrKnown = errors.New("sandbox already known")

// AttachIfAbsent attaches only a sandbox nri-cni has no record of (resync
// after downtime): a pod that was attached, or torn down by a Stop racing
// the resync, is never attached again.
func (m *Manager) AttachIfAbsent(ctx context.Context, sb Sandbox) (*state.Record, error) {
	return m.attach(ctx, sb, true)
}

func (m *Manager) attach(ctx context.Context, sb Sandbox, ifAbsent bool) (*state.Record, error) {
	if err := state.ValidID(sb.ID); err != nil {
		return nil, err
	}
	unlock, err := m.lockWithin(ctx, sb.ID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	return m.attachLocked(ctx, sb, ifAbsent, unlock)
}

// attachLocked is attach with the GC lock (shared) and sb's lock (unlock)
// taken: it releases both, or hands them to a rollback that outlives it.
func (m *Manager) attachLocked(ctx context.Context, sb Sandbox, ifAbsent bool, unlock func()) (_ *state.Record, err error) {
	handedOff := false
	// failedNet names the network whose ADD failed; attachedNow is set once
	// this call attached the sandbox (for the status sink).
	var failedNet string
	var attached *state.Record
	defer func() {
		if !handedOff {
			unlock()
			m.gcMu.RUnlock()
		}
		switch {
		case err != nil && !errors.Is(err, ErrKnown):
			m.reportFailure(sb, failedNet, err)
		case attached != nil:
			m.reportAttached(sb, attached)
		}
	}()

	if m.hotplug() {
		m.live.set(sb)
	}
	log := m.logFor(sb)
	if rec, err := m.store.Get(sb.ID); err == nil {
		if ifAbsent {
			return rec, ErrKnown
		}
		if rec.Phase == state.PhaseAttached {
			log.Info("already attached, not adding again")
			return rec, nil
		}
		// A previous attempt died half-way or was torn down: undo it first.
		if err := m.teardown(ctx, log, rec, ""); err != nil {
			return nil, fmt.Errorf("cleaning up the earlier attempt for %s: %w", podRef(sb), err)
		}
	} else if !errors.Is(err, state.ErrNotFound) {
		if ifAbsent {
			return nil, ErrKnown
		}
		log.WithError(err).Warn("unreadable record: cleaning up from the CNI cache")
		m.delCached(ctx, log, sb.ID, "")
	}

	ns, err := m.ns.Resolve(sb.Pid, sb.Pinned)
	if errors.Is(err, netns.ErrHostNetwork) {
		// Pinned path and pid agree: the sandbox runs in the host's
		// namespace by design (CRI-O pins one for hostNetwork pods).
		log.WithError(err).Debug("host-network sandbox: skipped")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: network namespace: %w", podRef(sb), err)
	}
	args, err := sb.Pod.Args()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	plan, skip, err := m.plan(ctx, sb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	if skip != "" {
		l := log.WithField("reason", skip)
		if skip == SkipNotRequested {
			l.Debug("no networks for this sandbox")
		} else {
			l.Info("no networks for this sandbox")
		}
		return nil, nil
	}
	// Before the intent record: a network whose plugins say they are not
	// ready (CNI STATUS) fails the pod at once, with nothing half done.
	if err := m.checkReady(plan); err != nil {
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	// Before the intent record: a pod asking for a capability the admin did
	// not grant gets nothing attached. NPWG selections carry their own
	// (checked by planNPWG); the pod's capability annotations are not theirs.
	var caps map[string]any
	if len(plan) > 0 && !plan[0].ownCaps {
		if caps, err = capabilityArgs(sb.Annotations, m.podCaps); err != nil {
			return nil, fmt.Errorf("%s: %w", podRef(sb), err)
		}
	}

	// Before the intent record: an interface name someone else holds in the
	// namespace fails the pod with nothing ADDed — the plugin's ADD would
	// fail, and its rollback DEL delete the other one's interface (another
	// container of the pod in hook mode, or any other CNI user).
	if err := m.checkIfnamesFree(ns.Path, plan); err != nil {
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}

	now := time.Now().UTC()
	rec := &state.Record{
		ID: sb.ID, Kind: sb.Kind, Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID,
		Netns: ns.Path, NetnsDev: ns.ID.Dev, NetnsIno: ns.ID.Ino,
		Phase: state.PhaseAdding, Created: now, Updated: now,
	}
	for _, a := range plan {
		rec.Networks = append(rec.Networks, state.Network{Name: a.net.Name, IfName: a.ifname, NAD: a.nad})
	}
	// Persist the intent first: if we die mid-ADD, teardown knows what to DEL.
	if err := m.store.Put(rec); err != nil {
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}

	results, errs := m.addAll(ctx, plan, func(a attachment) cni.Attachment {
		acaps := caps
		if a.ownCaps {
			acaps = a.caps
		}
		return cni.Attachment{ContainerID: sb.ID, IfName: a.ifname, Netns: ns.Path, Args: args, CapabilityArgs: acaps}
	})
	for i, a := range plan {
		nl := log.WithFields(logrus.Fields{"network": a.net.Name, "ifname": a.ifname})
		if a.nad != "" {
			nl = nl.WithField("nad", a.nad)
		}
		if errs[i] != nil {
			if failedNet == "" {
				failedNet, err = attachmentName(a), errs[i]
			}
			nl.WithError(errs[i]).Error("CNI ADD failed, rolling back")
			continue
		}
		if res := results[i]; res != nil {
			rec.Networks[i].IPs, rec.Networks[i].Mac, rec.Networks[i].DNS = res.IPs, res.Mac, dnsOf(res)
			nl.WithField("ips", res.IPs).Info("network attached")
		}
	}
	if failedNet != "" {
		// DEL what was ADDed or attempted (the CNI rule), never the rest
		// of the plan: it got no ADD.
		rec.Networks = attempted(rec.Networks, errs, results)
		if perr := m.store.Put(rec); perr != nil {
			log.WithError(perr).Warn("recording what the rollback DELs failed; a restart DELs the whole plan")
		}
		handedOff = true
		m.rollback(ctx, log, rec, unlock)
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	if err := m.setDefaultRoutes(ns.Path, plan, rec); err != nil {
		log.WithError(err).Error("default route not set, rolling back")
		handedOff = true
		m.rollback(ctx, log, rec, unlock)
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	m.noteNetns(rec.Netns)
	rec.Phase, rec.Updated = state.PhaseAttached, time.Now().UTC()
	if err := m.store.Put(rec); err != nil {
		log.WithError(err).Error("recording the attachment failed, rolling back")
		handedOff = true
		m.rollback(ctx, log, rec, unlock)
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	attached = rec
	return rec, nil
}

// setDefaultRoutes moves the pod's default routes to the attachments that
// carry an NPWG default-route, after every ADD succeeded, and records them.
func (m *Manager) setDefaultRoutes(path string, plan []attachment, rec *state.Record) error {
	for i, a := range plan {
		if len(a.gateways) == 0 {
			continue
		}
		if err := m.routes(path, a.ifname, a.gateways); err != nil {
			return fmt.Errorf("%s: \"default-route\": %w", attachmentName(a), err)
		}
		for _, gw := range a.gateways {
			rec.Networks[i].Gateways = append(rec.Networks[i].Gateways, gw.String())
		}
	}
	return nil
}

// addAll ADDs the plan's networks: in order, stopping at the first failure
// (the networks after it get no ADD and no result); or, with
// parallelAttach, all at once. Results and errors are by plan index.
func (m *Manager) addAll(ctx context.Context, plan []attachment, att func(attachment) cni.Attachment) ([]*cni.Result, []error) {
	results, errs := make([]*cni.Result, len(plan)), make([]error, len(plan))
	if !m.cfg.ParallelAttach || len(plan) < 2 {
		for i, a := range plan {
			if results[i], errs[i] = m.add(ctx, a.net, att(a)); errs[i] != nil {
				break
			}
		}
		return results, errs
	}
	var wg sync.WaitGroup
	for i, a := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = m.add(ctx, a.net, att(a))
		}()
	}
	wg.Wait()
	return results, errs
}

// ErrInterfaceExists: an interface the plan names is already in the
// sandbox's network namespace.
var ErrInterfaceExists = errors.New("interface already exists in the network namespace")

// checkIfnamesFree fails if an interface of plan already exists in the
// namespace at path.
func (m *Manager) checkIfnamesFree(path string, plan []attachment) error {
	names, err := m.ns.Links(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
	}
	for _, a := range plan {
		if have[a.ifname] {
			return fmt.Errorf("network %s: %w: %s (another container of the pod, or another CNI user, owns it; nothing was added)",
				attachmentName(a), ErrInterfaceExists, a.ifname)
		}
	}
	return nil
}

// attempted keeps the networks whose ADD ran: it succeeded, or it failed
// for another reason than having no time left to start (cni.ErrNoTime: the
// plugin was never executed). The networks after a failure in a serial
// attach have neither a result nor an error.
func attempted(nets []state.Network, errs []error, results []*cni.Result) []state.Network {
	var out []state.Network
	for i, n := range nets {
		if results[i] != nil || (errs[i] != nil && !errors.Is(errs[i], cni.ErrNoTime)) {
			out = append(out, n)
		}
	}
	return out
}

// dnsOf keeps a result's DNS section if it says anything.
func dnsOf(res *cni.Result) *state.DNS {
	d := res.DNS
	if len(d.Nameservers) == 0 && d.Domain == "" && len(d.Search) == 0 && len(d.Options) == 0 {
		return nil
	}
	return &state.DNS{Nameservers: d.Nameservers, Domain: d.Domain, Search: d.Search, Options: d.Options}
}

func (m *Manager) add(ctx context.Context, n *cni.Network, a cni.Attachment) (*cni.Result, error) {
	cctx, cancel, err := cni.Budget(ctx, m.cfg.CNITimeout.D(), m.margin)
	if err != nil {
		return nil, fmt.Errorf("network %q: %w", n.Name, err)
	}
	defer cancel()
	start := time.Now()
	res, err := m.engine.Add(cctx, n, a)
	m.observe("add", n.Name, err, time.Since(start))
	if err != nil && cctx.Err() != nil {
		return nil, fmt.Errorf("%w (timed out after %s: cniTimeout or the runtime's deadline)", err, m.cfg.CNITimeout.D())
	}
	return res, err
}

// rollback DELs everything rec lists on a fresh context bounded by
// cniTimeout per network, and waits for it until the caller's deadline (less
// the margin). If that comes first, the rollback goes on in the background,
// still holding the sandbox's lock, so the runtime's follow-up Stop/Remove
// wait for it instead of racing it. unlock is called when it ends.
func (m *Manager) rollback(ctx context.Context, log *logrus.Entry, rec *state.Record, unlock func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer m.gcMu.RUnlock()
		defer unlock()
		if err := m.teardown(context.WithoutCancel(ctx), log, rec, rec.Netns); err != nil {
			log.WithError(err).Error("rollback incomplete: the record is kept for a later retry")
			return
		}
		if err := m.store.Delete(rec.ID); err != nil {
			log.WithError(err).Error("deleting the record after rollback")
		}
	}()
	wait := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(context.WithoutCancel(ctx), d.Add(-m.margin/2))
		defer cancel()
	}
	select {
	case <-done:
	case <-wait.Done():
		log.Warn("rollback continues in the background past the runtime's deadline")
	}
}

func podRef(sb Sandbox) string {
	if sb.Kind == "container" {
		return fmt.Sprintf("container %s (pod %s/%s)", sb.ID, sb.Pod.Namespace, sb.Pod.Name)
	}
	if sb.Pod.Name != "" {
		return fmt.Sprintf("pod %s/%s (sandbox %s)", sb.Pod.Namespace, sb.Pod.Name, short(sb.ID))
	}
	return fmt.Sprintf("%s %s", sb.Kind, short(sb.ID))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// timed runs op and logs its outcome with its duration: errors at error
// level (and returned), success at debug.
func timed(log *logrus.Entry, what string, op func() error) error {
	start := time.Now()
	err := op()
	log = log.WithField("duration", time.Since(start).Round(time.Microsecond))
	if err != nil {
		log.WithError(err).Error(what + " failed")
		return err
	}
	log.Debug(what + " done")
	return nil
}

// Build wires a Manager from a config: the state dir, the host-netns
// resolver and the CNI engine with the configs loaded (validated against the
// plugin binaries unless noValidate). skipped names each invalid config file.
func Build(ctx context.Context, cfg config.Config, log *logrus.Entry, noValidate bool, opts ...Option) (mgr *Manager, skipped []error, err error) {
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return nil, nil, err
	}
	resolver, err := netns.NewResolver()
	if err != nil {
		return nil, nil, err
	}
	engine := cni.New(cni.Options{ConfDir: cfg.ConfDir, BinDirs: cfg.BinDirs, CacheDir: cfg.CacheDir, NoValidate: noValidate})
	if skipped, err = engine.Reload(ctx); err != nil {
		return nil, nil, err
	}
	return NewManager(cfg, engine, resolver, store, log, opts...), skipped, nil
}
