package attach

// The attach path, top to bottom: lock the sandbox → its record (attached
// already? an earlier attempt to undo?) → its network namespace → the plan
// → readiness and free interface names → the intent record → the
// MultiNetworkPolicy rules (when on: policy.go) → ADD → on a failure the
// rollback, else the rules with the pod's addresses, default routes and
// the attached record.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// Errors of the attach path.
var (
	// ErrKnown: AttachIfAbsent found a record (any phase) and did nothing.
	ErrKnown = errors.New("sandbox already known")
	// ErrBusy: another operation on the pod (the resync's GC or attach, a
	// teardown) did not end in time for the runtime's request. The
	// runtime's caller retries (the kubelet retries CreateContainer).
	ErrBusy = errors.New("another nri-cni operation on this pod is still running; retry")
	// ErrInterfaceExists: an interface the plan names is already in the
	// sandbox's network namespace.
	ErrInterfaceExists = errors.New("interface already exists in the network namespace")
	// ErrNotRunning: a listed sandbox the runtime is not running.
	ErrNotRunning = errors.New("not running")
)

// Attach ADDs the sandbox's planned networks and records them.
func (m *Manager) Attach(ctx context.Context, sb Sandbox) (*state.Record, error) {
	return m.attach(ctx, sb, false)
}

// AttachIfAbsent attaches only a sandbox nri-cni has no record of (resync
// after downtime): a pod that was attached, or torn down by a Stop racing
// the resync, is never attached again.
func (m *Manager) AttachIfAbsent(ctx context.Context, sb Sandbox) (*state.Record, error) {
	return m.attach(ctx, sb, true)
}

// EnsureAttached attaches sb's networks if nri-cni has no record of it and it
// should get some (the same rules as Run), when a container of it is about
// to be created (NRI CreateContainer: fail-closed for a pod created while
// nri-cni was away). It returns the new record when it attached now, and
// nil, nil when there was nothing to do: the pod is known (any phase), gets
// no networks, or has no network namespace. The common case costs one
// record lookup.
//
// Only sandboxes the runtime is running are attached (Running; pidless as
// the runtime reports them); another one is an error. Waiting for another
// operation on the pod ends before ctx's deadline minus the margin, with
// ErrBusy: the runtime must get its answer in time.
func (m *Manager) EnsureAttached(ctx context.Context, sb Sandbox, pidless bool) (*state.Record, error) {
	if need, err := m.needsAttach(ctx, sb, pidless); !need || err != nil {
		return nil, err
	}
	rec, err := m.attach(ctx, sb, true)
	if errors.Is(err, ErrKnown) {
		return nil, nil // attached meanwhile (Run or the resync)
	}
	return rec, err
}

// needsAttach: EnsureAttached's rules — whether sb, about to get a
// container, has networks to attach that it does not have (an error if it
// does but the runtime is not running it).
func (m *Manager) needsAttach(ctx context.Context, sb Sandbox, pidless bool) (bool, error) {
	if sb.Pinned == "" {
		return false, nil // no network namespace of its own (host network)
	}
	if err := state.ValidID(sb.ID); err != nil {
		return false, err
	}
	if rec, err := m.store.Get(sb.ID); err == nil && rec.Phase != state.PhaseAdding ||
		err != nil && !errors.Is(err, state.ErrNotFound) {
		return false, nil // attached or torn down, or unreadable: known, as for AttachIfAbsent
	}
	if p, err := m.planner.Plan(ctx, m.pod(sb)); err == nil && p.Skip != "" {
		return false, nil // filtered out, opted out, or not asking (requireAnnotation)
	}
	if err := m.Running(sb, pidless); err != nil {
		return false, fmt.Errorf("%s: not attaching: %w", PodRef(sb), err)
	}
	return true, nil
}

// ResolveRunning resolves the network namespace of the live process pid,
// cross-checked with the pinned path (the engine's resolver): what the
// resync needs to stop a container started without its networks.
func (m *Manager) ResolveRunning(pid uint32, pinned string) (netns.Netns, error) {
	return m.ns.ResolveRunning(pid, pinned)
}

// Running decides whether a sandbox the runtime lists is one it is really
// running, the only kind a resync or CreateContainer may attach (nil = it
// is):
//   - Pid > 0: the process is alive in the pinned network namespace;
//   - Pid 0: only where the runtime runs pods without a pid (pidless: CRI-O
//     with the infra container dropped), and then its pinned namespace must
//     exist.
//
// Host-network sandboxes pass; the attach that follows skips them by the
// same rule as RunPodSandbox.
func (m *Manager) Running(sb Sandbox, pidless bool) error {
	var err error
	switch {
	case sb.Pinned == "":
		return errors.New("no network namespace (host network)")
	case sb.Pid > 0:
		_, err = m.ns.ResolveRunning(sb.Pid, sb.Pinned)
	case !pidless:
		return errors.Join(ErrNotRunning, errors.New("the runtime reports no process for it (pid 0)"))
	default:
		_, err = m.ns.Check(sb.Pinned)
	}
	// The host's namespace at the pinned path (the pid agreeing) is a
	// host-network sandbox, not a stopped one.
	if err != nil && !errors.Is(err, netns.ErrHostNetwork) && !(sb.Pid == 0 && errors.Is(err, netns.ErrHostNetns)) {
		return errors.Join(ErrNotRunning, err)
	}
	return nil
}

func (m *Manager) attach(ctx context.Context, sb Sandbox, ifAbsent bool) (_ *state.Record, err error) {
	if err := state.ValidID(sb.ID); err != nil {
		return nil, err
	}
	release, err := m.locks.sandbox(ctx, sb.ID, 0, m.margin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	handedOff := false
	// failedNet names the network whose ADD failed; attached is set once
	// this call attached the sandbox (for the status sink).
	var failedNet string
	var attached *state.Record
	defer func() {
		if !handedOff {
			release()
		}
		switch {
		case err != nil && !errors.Is(err, ErrKnown):
			m.report.failed(sb, failedNet, err)
		case attached != nil:
			m.report.attached(sb, attached)
		}
	}()

	if m.hotplug() {
		m.live.set(sb)
	}
	log := m.logFor(sb)
	if done, rec, err := m.earlier(ctx, log, sb, ifAbsent); done {
		return rec, err
	}
	ns, err := m.ns.Resolve(sb.Pid, sb.Pinned)
	if errors.Is(err, netns.ErrHostNetwork) {
		// Pinned path and pid agree: the sandbox runs in the host's
		// namespace by design (CRI-O pins one for hostNetwork pods).
		log.WithError(err).Debug("host-network sandbox: skipped")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: network namespace: %w", PodRef(sb), err)
	}
	args, err := sb.Pod.Args()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	p, err := m.planner.Plan(ctx, m.pod(sb))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	if p.Skip != "" {
		m.logSkip(log, p.Skip)
		return nil, nil
	}
	// Before the intent record, so a failure leaves nothing half done: a
	// network whose plugins say they are not ready (CNI STATUS); an
	// interface name someone else holds in the namespace (the plugin's ADD
	// would fail, and its rollback DEL delete the other one's interface:
	// another container of the pod in hook mode, or another CNI user).
	if err := m.planner.CheckReady(p.Attachments); err != nil {
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	if err := m.checkIfnamesFree(ns.Path, p.Attachments); err != nil {
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	// Devices: which the kubelet allocated (the PodResources API), then
	// their device-info files (removed again if nothing gets recorded).
	devs, err := m.cni.devs.assign(ctx, sb, p.Attachments, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	if err := m.cni.devs.seed(sb.ID, p.Attachments, devs); err != nil {
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}

	now := time.Now().UTC()
	rec := &state.Record{
		ID: sb.ID, Kind: sb.Kind, Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID,
		Netns: ns.Path, NetnsDev: ns.ID.Dev, NetnsIno: ns.ID.Ino,
		Phase: state.PhaseAdding, Created: now, Updated: now, Args: args,
	}
	for _, a := range p.Attachments {
		rec.Networks = append(rec.Networks, recorded(a))
	}
	// Persist the intent first: if we die mid-ADD, teardown knows what to DEL.
	if err := m.store.Put(rec); err != nil {
		m.cni.devs.unseed(sb.ID, p.Attachments)
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	// MultiNetworkPolicy: the planned interfaces closed before any of them
	// exists, their full rules programmed beside the ADDs (policy.go). A
	// failure to close them ends the attach as a failed ADD does, with no
	// ADD to undo: the intent goes.
	polDone := func() error { return nil }
	if m.pol != nil {
		m.pol.remember(sb)
		if polDone, err = m.pol.programBeside(ctx, ns, rec, rec.Networks); err != nil {
			m.cni.devs.unseed(sb.ID, p.Attachments)
			if derr := m.store.Delete(sb.ID); derr != nil {
				log.WithError(derr).Warn("deleting the intent record failed; a later attach or the GC undoes it")
			}
			m.pol.forget(sb.ID, "")
			return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
		}
	}

	results, errs := m.addAll(ctx, p.Attachments, func(a plan.Attachment) cni.Attachment {
		return cni.Attachment{ContainerID: sb.ID, IfName: a.IfName, Netns: ns.Path, Args: args, CapabilityArgs: a.Caps}
	})
	// The full rules: in place before the record is read again, and before
	// anything in the pod runs (a failure rolls the ADDs back, below).
	polErr := polDone()
	for i, a := range p.Attachments {
		nl := log.WithFields(logrus.Fields{"network": a.Network.Name, "ifname": a.IfName})
		if a.NAD != "" {
			nl = nl.WithField("nad", a.NAD)
		}
		if errs[i] != nil {
			if failedNet == "" {
				failedNet, err = a.Name(), errs[i]
			}
			nl.WithError(errs[i]).Error("CNI ADD failed, rolling back")
			continue
		}
		if res := results[i]; res != nil {
			fromResult(&rec.Networks[i], res)
			if a.Claim != nil {
				rec.Networks[i].Result = res.Raw
			}
			if err := m.cni.devs.read(sb.ID, &rec.Networks[i]); err != nil {
				nl.WithError(err).Warn("device-info not read: network-status goes without it")
			}
			if a.DeviceID != "" {
				nl = nl.WithFields(logrus.Fields{"resource": a.Network.ResourceName, "device": a.DeviceID})
				if from := devs[a.DeviceID].From; from != "" {
					nl = nl.WithField("deviceFrom", from)
				}
			}
			nl.WithField("ips", res.IPs).Info("network attached")
		}
	}
	if failedNet != "" {
		// DEL what was ADDed or attempted (the CNI rule), never the rest
		// of the plan: it got no ADD.
		rec.Networks = attempted(rec.Networks, errs, results)
		m.cni.devs.unseed(sb.ID, p.Attachments) // also those that got no ADD
		if perr := m.store.Put(rec); perr != nil {
			log.WithError(perr).Warn("recording what the rollback DELs failed; a restart DELs the whole plan")
		}
		handedOff = true
		m.rollback(ctx, log, rec, release, ranNetworks(p.Attachments))
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	// The rules again with the pod's addresses known (programmed only if
	// the digest changed), before the default routes move: a rollback
	// leaves eth0's in place.
	if m.pol != nil {
		err := polErr
		if err == nil {
			err = m.pol.program(ctx, ns, rec, rec.Networks, false)
		}
		if err != nil {
			log.WithError(err).Error("MultiNetworkPolicy rules with the pod's addresses not programmed, rolling back")
			handedOff = true
			m.rollback(ctx, log, rec, release, ranNetworks(p.Attachments))
			m.pol.forget(sb.ID, "")
			return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
		}
	}
	if err := m.setDefaultRoutes(ns.Path, p.Attachments, rec); err != nil {
		log.WithError(err).Error("default route not set, rolling back")
		handedOff = true
		m.rollback(ctx, log, rec, release, ranNetworks(p.Attachments))
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	m.noteNetns(rec.Netns)
	rec.Phase, rec.Updated = state.PhaseAttached, time.Now().UTC()
	if err := m.store.Put(rec); err != nil {
		log.WithError(err).Error("recording the attachment failed, rolling back")
		handedOff = true
		m.rollback(ctx, log, rec, release, ranNetworks(p.Attachments))
		return nil, fmt.Errorf("%s: %w", PodRef(sb), err)
	}
	attached = rec
	if m.pol != nil {
		m.pol.tell(rec)
	}
	m.report.noted(log, sb, p.Notes, nil)
	return rec, nil
}

// logSkip logs why a sandbox gets no networks (a pod not asking, at debug).
func (m *Manager) logSkip(log *logrus.Entry, reason string) {
	l := log.WithField("reason", reason)
	if reason == plan.SkipNotRequested {
		l.Debug("no networks for this sandbox")
	} else {
		l.Info("no networks for this sandbox")
	}
}

// earlier handles what nri-cni already knows of sb (its lock held): done
// means attach returns (rec, err) at once — attached already, or (ifAbsent)
// known: attached or torn down; an earlier attempt that died half-way or was
// torn down is undone first, and an unreadable record cleaned up from
// libcni's cache.
//
// A record in phase adding found under the lock is never an attach in
// progress (attach and its rollback hold the lock until they end): it is one
// cut short (nri-cni killed mid-way) or one whose rollback DEL failed. Even
// with ifAbsent it is undone and the sandbox attached again: a pod the
// runtime is running must not stay, or start its containers, half attached.
func (m *Manager) earlier(ctx context.Context, log *logrus.Entry, sb Sandbox, ifAbsent bool) (done bool, _ *state.Record, _ error) {
	rec, err := m.store.Get(sb.ID)
	switch {
	case err == nil && ifAbsent && rec.Phase != state.PhaseAdding:
		return true, rec, ErrKnown
	case err == nil && rec.Phase == state.PhaseAttached:
		log.Info("already attached, not adding again")
		return true, rec, nil
	case err == nil:
		if rec.Phase == state.PhaseAdding {
			log.WithField("networks", len(rec.Networks)).Warn("an earlier attach was cut short or not rolled back: undoing it, then attaching again")
		}
		// In the sandbox's namespace while it is the one recorded (the
		// plugins then remove their interfaces too), else empty.
		if err := m.cni.teardownLive(ctx, log, rec); err != nil {
			return true, nil, fmt.Errorf("cleaning up the earlier attempt for %s: %w", PodRef(sb), err)
		}
	case errors.Is(err, state.ErrNotFound):
	case ifAbsent:
		return true, nil, ErrKnown
	default:
		log.WithError(err).Warn("unreadable record: cleaning up from the CNI cache")
		_ = m.cni.delCached(ctx, log, sb.ID, "")
	}
	return false, nil, nil
}

// checkIfnamesFree fails if an interface of atts already exists in the
// namespace at path.
func (m *Manager) checkIfnamesFree(path string, atts []plan.Attachment) error {
	names, err := m.ns.Links(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
	}
	for _, a := range atts {
		if have[a.IfName] {
			return fmt.Errorf("network %s: %w: %s (another container of the pod, or another CNI user, owns it; nothing was added)",
				a.Name(), ErrInterfaceExists, a.IfName)
		}
	}
	return nil
}

// addAll ADDs the attachments: in order, stopping at the first failure
// (the networks after it get no ADD and no result); or, with
// parallelAttach, all at once. Results and errors are by index.
func (m *Manager) addAll(ctx context.Context, atts []plan.Attachment, att func(plan.Attachment) cni.Attachment) ([]*cni.Result, []error) {
	results, errs := make([]*cni.Result, len(atts)), make([]error, len(atts))
	if !m.cfg.ParallelAttach || len(atts) < 2 {
		for i, a := range atts {
			if results[i], errs[i] = m.cni.add(ctx, a.Network, att(a)); errs[i] != nil {
				break
			}
		}
		return results, errs
	}
	var wg sync.WaitGroup
	for i, a := range atts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = m.cni.add(ctx, a.Network, att(a))
		}()
	}
	wg.Wait()
	return results, errs
}

// setDefaultRoutes moves the pod's default routes to the attachments that
// carry an NPWG default-route, after every ADD succeeded, and records them.
func (m *Manager) setDefaultRoutes(path string, atts []plan.Attachment, rec *state.Record) error {
	for i, a := range atts {
		if len(a.Gateways) == 0 {
			continue
		}
		if err := m.routes(path, a.IfName, a.Gateways); err != nil {
			return fmt.Errorf("%s: \"default-route\": %w", a.Name(), err)
		}
		for _, gw := range a.Gateways {
			rec.Networks[i].Gateways = append(rec.Networks[i].Gateways, gw.String())
		}
	}
	return nil
}

// rollback DELs everything rec lists on a fresh context bounded by
// cniTimeout per network, and waits for it until the caller's deadline (less
// the margin). If that comes first, the rollback goes on in the background,
// still holding the sandbox's lock, so the runtime's follow-up Stop/Remove
// wait for it instead of racing it. release is called when it ends.
func (m *Manager) rollback(ctx context.Context, log *logrus.Entry, rec *state.Record, release func(), ran map[string]*cni.Network) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer release()
		if err := m.cni.teardownLiveWith(context.WithoutCancel(ctx), log, rec, ran); err != nil {
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

// ranNetworks are the networks atts' ADDs run with (their devices and
// cni-args in them), by interface name: what a rollback DELs with when an
// ADD left no libcni cache entry.
func ranNetworks(atts []plan.Attachment) map[string]*cni.Network {
	out := make(map[string]*cni.Network, len(atts))
	for _, a := range atts {
		out[a.IfName] = a.Network
	}
	return out
}

// PodRef names the sandbox in errors.
func PodRef(sb Sandbox) string {
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
