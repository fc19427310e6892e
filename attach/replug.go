package attach

// Hot-plug (Kubernetes mode, kubernetes.hotplug): a running pod's networks
// follow its networks annotation. kube/ watches the node's pods and calls
// Replug; the Manager does the work under the same locks as Run and Stop:
//
//   - the sandbox comes from memory (live: every pod sandbox the runtime
//     announced by RunPodSandbox or Synchronize, dropped at Stop);
//   - the new annotation is planned exactly as at RunPodSandbox; a bad value
//     changes nothing (a Warning Event says why);
//   - the plan is matched against the record by network (NAD or CNI name)
//     and interface: a network that stays keeps its interface even when the
//     pod did not name it; added ones get free names;
//   - removed networks are DELed first (in the pod's netns); with
//     MultiNetworkPolicy on, the rules of the kept and added interfaces are
//     programmed next (policy.go); then added ones are recorded (pending)
//     before their ADD, so a crash never loses one; a failed ADD rolls back
//     this hot-plug's ADDs; the rules with the new addresses follow the
//     ADDs, before the record is confirmed;
//   - network-status is reported afterwards.
//
// Idempotent: Replug with an unchanged annotation does nothing, so kube/ may
// call it for every pod after a restart (pending networks are redone).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// ErrHotplugRefused wraps changes hot-plug will not make (a bad annotation,
// an unknown NAD, default-route); nothing was changed and retrying the same
// value is pointless.
var ErrHotplugRefused = errors.New("hot-plug refused")

// PodUpdate is a pod's networks annotations as the API server has them.
type PodUpdate struct {
	UID, Namespace, Name string
	Annotations          map[string]string
	// Changed: the networks annotation changed (else a resync: only pods
	// nri-cni has a record of are reconciled).
	Changed bool
	// Quiet: a retry of a value whose failure was reported already; a
	// failure is logged by the caller, not raised as a Warning Event again.
	// A refusal is always reported (it is a new verdict).
	Quiet bool
	// GiveUp, if set, is the caller's last try at this value: a failure's
	// Warning Event ends with it (what the caller does next).
	GiveUp string
}

// Replugger is what kube/ calls on pod updates (the Manager).
type Replugger interface {
	Replug(ctx context.Context, u PodUpdate) (changed bool, err error)
}

// Replug makes the pod's attachments match u's annotations. changed reports
// whether anything was attached or detached.
func (m *Manager) Replug(ctx context.Context, u PodUpdate) (changed bool, err error) {
	sb, ok := m.live.get(u.UID)
	if !ok || !m.hotplug() {
		return false, nil // not running on this node (yet), or hot-plug off
	}
	// A background loop: a pod busy with another operation (its attach, a
	// teardown) is retried later (ErrBusy), not waited for, so one busy pod
	// never holds up the others' hot-plugs.
	release, err := m.locks.sandbox(ctx, sb.ID, BackgroundLockWait, m.margin)
	if err != nil {
		return false, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), err)
	}
	defer release()
	if cur, ok := m.live.get(u.UID); !ok || cur.ID != sb.ID {
		return false, nil // stopped or replaced while we waited
	}
	rec, err := m.store.Get(sb.ID)
	switch {
	case errors.Is(err, state.ErrNotFound):
		if !u.Changed {
			return false, nil
		}
		rec = nil
	case err != nil:
		return false, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), err)
	case rec.Phase != state.PhaseAttached:
		return false, nil // being torn down, or torn down
	}
	sb.Annotations = u.Annotations
	log := m.logFor(sb).WithField("event", "hot-plug")
	changed, err = m.replug(ctx, log, sb, rec)
	refused := errors.Is(err, ErrHotplugRefused)
	switch {
	case err == nil:
	case errors.Is(err, plan.ErrSourceNotSynced):
		// A NAD cache still filling (nri-cni just started: every pod is
		// handed over again) is no verdict on the pod: retried by the
		// caller, without a Warning Event on every pod of the node.
	case u.Quiet && !refused:
	case u.GiveUp != "" && !refused:
		m.report.failed(sb, "", fmt.Errorf("%w; %s", err, u.GiveUp))
	default:
		m.report.failed(sb, "", err)
	}
	return changed, err
}

// replug is Replug with the locks taken; rec is nil for a pod without one.
func (m *Manager) replug(ctx context.Context, log *logrus.Entry, sb Sandbox, rec *state.Record) (bool, error) {
	refuse := func(err error) error {
		return fmt.Errorf("%s: %w: %w (nothing changed)", PodRef(sb), ErrHotplugRefused, err)
	}
	// Only the pod's own annotation drives hot-plug. A namespace the config
	// now filters out, or Multus having become the node's primary network,
	// changes what new pods get, never what running pods have.
	if !m.cfg.Namespaces.Allows(sb.Pod.Namespace) {
		return false, nil
	}
	if m.planner.MultusOwns(sb.Annotations) != "" {
		return false, nil
	}
	p, err := m.planner.Plan(ctx, m.pod(sb))
	if errors.Is(err, plan.ErrSourceNotSynced) {
		return false, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), err)
	}
	if err != nil {
		return false, refuse(err)
	}
	ns, err := m.ns.Resolve(sb.Pid, sb.Pinned)
	if errors.Is(err, netns.ErrHostNetwork) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: hot-plug: network namespace: %w", PodRef(sb), err)
	}
	if rec == nil {
		now := time.Now().UTC()
		rec = &state.Record{ID: sb.ID, Kind: sb.Kind, Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID,
			Netns: ns.Path, NetnsDev: ns.ID.Dev, NetnsIno: ns.ID.Ino, Phase: state.PhaseAttached, Created: now, Updated: now}
	} else if rec.NetnsIno != 0 && (ns.ID != netns.ID{Dev: rec.NetnsDev, Ino: rec.NetnsIno}) {
		return false, fmt.Errorf("%s: hot-plug: the sandbox's network namespace is not the recorded one", PodRef(sb))
	}
	_, add, remove := m.planner.Diff(rec.Networks, p.Attachments)
	if len(add) == 0 && len(remove) == 0 {
		return false, nil
	}
	if err := m.planner.CheckReady(add); err != nil {
		return false, refuse(err)
	}
	for _, a := range add {
		if len(a.Gateways) > 0 {
			return false, refuse(fmt.Errorf("%s: \"default-route\" is applied when the pod starts, not by hot-plug", a.Name()))
		}
	}
	for _, i := range remove {
		if len(rec.Networks[i].Gateways) > 0 {
			return false, refuse(fmt.Errorf("%s carries the pod's default route: it is removed with the pod, not by hot-plug", rec.Networks[i].Name))
		}
	}
	args, err := sb.Pod.Args()
	if err != nil {
		return false, fmt.Errorf("%s: %w", PodRef(sb), err)
	}

	// Removed networks: DEL (in reverse), then forget them. One whose DEL
	// fails stays recorded, so Stop tries again.
	var errs []error
	gone := map[int]bool{}
	for k := len(remove) - 1; k >= 0; k-- {
		n := rec.Networks[remove[k]]
		one := &state.Record{ID: rec.ID, Netns: rec.Netns, NetnsDev: rec.NetnsDev, NetnsIno: rec.NetnsIno, Networks: []state.Network{n}}
		if err := m.cni.teardownLive(ctx, log, one); err != nil {
			errs = append(errs, err)
			continue
		}
		gone[remove[k]] = true
	}
	var nets []state.Network
	for i, n := range rec.Networks {
		if !gone[i] {
			nets = append(nets, n)
		}
	}
	err = m.checkIfnamesFree(ns.Path, add)
	var devs Assigned
	if err == nil {
		devs, err = m.cni.devs.assign(ctx, sb, add, inUse(nets))
	}
	if err == nil {
		err = m.cni.devs.seed(sb.ID, add, devs)
	}
	if err != nil {
		// Nothing added; the removals stand.
		rec.Networks, rec.Updated = nets, time.Now().UTC()
		errs = append(errs, err)
		if perr := m.store.Put(rec); perr != nil {
			errs = append(errs, perr)
		}
		m.report.attached(sb, rec)
		return len(gone) > 0, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), errors.Join(errs...))
	}
	first := len(nets)
	for _, a := range add {
		n := recorded(a)
		n.Pending = true
		nets = append(nets, n)
	}
	// MultiNetworkPolicy: the rules of the kept and added interfaces (not
	// the removed ones), before the added ones exist; a failure adds
	// nothing (the removals stand).
	if m.pol != nil {
		m.pol.remember(sb)
		if err := m.pol.program(ctx, ns, rec, nets, false); err != nil {
			m.cni.devs.unseed(sb.ID, add)
			rec.Networks, rec.Updated = nets[:first], time.Now().UTC()
			errs = append(errs, err)
			if perr := m.store.Put(rec); perr != nil {
				errs = append(errs, perr)
			}
			m.report.attached(sb, rec)
			return len(gone) > 0, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), errors.Join(errs...))
		}
	}
	rec.Networks, rec.Updated = nets, time.Now().UTC()
	if err := m.store.Put(rec); err != nil {
		m.cni.devs.unseed(sb.ID, add)
		return len(gone) > 0, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), err)
	}

	// undo rolls back this hot-plug's ADDs up to rec.Networks[last] after
	// cause, and reports what the pod has.
	undo := func(last int, cause error) (bool, error) {
		added := &state.Record{ID: rec.ID, Netns: rec.Netns, NetnsDev: rec.NetnsDev, NetnsIno: rec.NetnsIno, Networks: rec.Networks[first : last+1],
			Args: rec.Args}
		if rerr := m.cni.teardownLiveWith(context.WithoutCancel(ctx), log, added, ranNetworks(add)); rerr != nil {
			// Kept (pending) for Stop to DEL again.
			errs = append(errs, rerr)
		} else {
			rec.Networks = rec.Networks[:first]
		}
		rec.Updated = time.Now().UTC()
		errs = append(errs, cause)
		if perr := m.store.Put(rec); perr != nil {
			errs = append(errs, perr)
		}
		m.report.attached(sb, rec)
		return len(gone) > 0, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), errors.Join(errs...))
	}

	// Added networks: ADD; a failure rolls back this hot-plug's ADDs.
	for k, a := range add {
		i := first + k
		nl := log.WithFields(logrus.Fields{"network": a.Network.Name, "ifname": a.IfName})
		res, err := m.cni.add(ctx, a.Network, cni.Attachment{ContainerID: sb.ID, IfName: a.IfName, Netns: ns.Path, Args: args, CapabilityArgs: a.Caps})
		if err != nil {
			nl.WithError(err).Error("hot-plug: CNI ADD failed, rolling back this hot-plug's ADDs")
			return undo(i, fmt.Errorf("%s: %w", a.Name(), err))
		}
		fromResult(&rec.Networks[i], res)
		rec.Networks[i].Pending = false
		if a.Claim != nil {
			rec.Networks[i].Result = res.Raw
		}
		if err := m.cni.devs.read(sb.ID, &rec.Networks[i]); err != nil {
			nl.WithError(err).Warn("device-info not read: network-status goes without it")
		}
		nl.WithField("ips", res.IPs).Info("network attached (hot-plug)")
	}
	// The rules again with the added interfaces' addresses, before the
	// record is confirmed and the status reported.
	if m.pol != nil && len(add) > 0 {
		if err := m.pol.program(ctx, ns, rec, rec.Networks, false); err != nil {
			log.WithError(err).Error("hot-plug: MultiNetworkPolicy rules with the new addresses not programmed, rolling back this hot-plug's ADDs")
			return undo(len(rec.Networks)-1, err)
		}
	}
	m.noteNetns(rec.Netns)
	rec.Updated = time.Now().UTC()
	if err := m.store.Put(rec); err != nil {
		errs = append(errs, err)
	}
	m.report.attached(sb, rec)
	if m.pol != nil {
		m.pol.tell(rec)
	}
	// Only the networks this hot-plug added: the others were noted when
	// they were attached.
	addedIfnames := map[string]bool{}
	for _, a := range add {
		addedIfnames[a.IfName] = true
	}
	m.report.noted(log, sb, p.Notes, addedIfnames)
	log.WithFields(logrus.Fields{"added": len(add), "removed": len(gone)}).Info("networks changed (hot-plug)")
	if len(errs) > 0 {
		return true, fmt.Errorf("%s: hot-plug: %w", PodRef(sb), errors.Join(errs...))
	}
	return true, nil
}
