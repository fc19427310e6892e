package attach

// MultiNetworkPolicy on the interfaces nri-cni attaches (nri-cni-k8s with
// kubernetes.multiNetworkPolicy; docs/multinetworkpolicy.md). The engine
// keeps the order and the records; the rules come from a PolicySource
// (kube: memory only) and are programmed by a Firewall (nft), both
// declared here. Without them (Deps.Policy or Deps.Firewall nil) nothing
// here runs: no render, no netlink.
//
//   - Attach: after the intent record, the planned interfaces (names and
//     identities, no addresses yet) are rendered and programmed BEFORE the
//     first ADD, so every interface is born filtered; a failure fails the
//     sandbox with no ADD. After the ADDs, a second render with the pod's
//     own addresses is programmed if its digest changed; a failure rolls
//     the ADDs back. The attached record carries the digest.
//   - Hot-plug: the kept and added interfaces are programmed before the
//     pending record and the ADD, again with the addresses before the
//     record is confirmed and the status reported; a removal re-renders.
//   - ApplyPolicy (kube's dirty queue, and every record after a restart):
//     under the sandbox's lock taken with a bounded wait (ErrBusy), the
//     record is rendered again and programmed only when the digest differs
//     from the record's or from the table's marker.
//   - Quarantine: when reprogramming keeps failing (the queue's retries),
//     the covered interfaces are set down and recorded; the next successful
//     ApplyPolicy sets them up again.
//   - Check (the periodic drift check): a marker that is not the record's
//     is reprogrammed, with a Warning Event.
//   - Teardown: no netlink (the table dies with the netns); the pod's
//     addresses are forgotten as a peer.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/state"
)

// PolicySource renders the rules of one pod (kube implements it). It reads
// memory only: it is called inside the runtime's request. Until its caches
// synced it answers a deny-all ruleset (every interface of the target, both
// directions), not an error: an error fails the attach. Target.Labels are
// the runtime's (nil after a restart) and NamedPorts nil: the source takes
// the API's copy of the pod when it has one with the target's UID.
type PolicySource interface {
	Render(ctx context.Context, t ir.Target) (ir.Ruleset, []ir.Note, error)
}

// Firewall programs rulesets into pods' network namespaces (nft implements
// it). It never writes to the host's namespace.
type Firewall interface {
	// Apply replaces the pod's table with rs in one transaction; an empty
	// rs deletes the table if there is one.
	Apply(ctx context.Context, ns netns.Netns, rs ir.Ruleset) error
	// Digest is the digest (ir.Ruleset.Digest) the table in ns was
	// programmed with, read from its marker; "" when ns has no table.
	Digest(ctx context.Context, ns netns.Netns) (string, error)
}

// LocalPeers, when the PolicySource implements it, learns this node's pods'
// own addresses from the records, the moment an attach or hot-plug records
// them (no network-status round trip): peers of other pods' policies.
// Calls repeat unchanged values (every ApplyPolicy tells its pod again);
// an unchanged value must be no change.
type LocalPeers interface {
	SetLocal(pod PolicyPod, ifs []ir.Interface)
	ForgetLocal(pod PolicyPod)
}

// PolicyApplier is what kube's dirty queue calls (the Manager).
type PolicyApplier interface {
	ApplyPolicy(ctx context.Context, sandboxID string) error
	Quarantine(ctx context.Context, sandboxID string) error
	PolicySandboxes() []string
}

// PolicyPod names the pod of a policy event.
type PolicyPod struct {
	Namespace, Name, UID string
	SandboxID            string
}

// PolicySink, when the status sink implements it, is told what rendering
// noted about a pod's policies (Events on the policies) and of Warning
// Events on the pod (Reason*). Both must return at once.
type PolicySink interface {
	PolicyNotes(pod PolicyPod, notes []ir.Note)
	PolicyWarning(pod PolicyPod, reason string, err error)
}

// Reasons of the Warning Events on a pod.
const (
	// ReasonPolicyDrift: the table in the pod's netns was not the one
	// programmed (someone changed or deleted it); reprogrammed.
	ReasonPolicyDrift = "MultiNetworkPolicyDrift"
	// ReasonPolicyNotEnforced: reprogramming kept failing; the covered
	// interfaces are down until it succeeds.
	ReasonPolicyNotEnforced = "MultiNetworkPolicyNotEnforced"
)

// ErrPolicyNotProgrammed wraps every failure to render or program a pod's
// rules.
var ErrPolicyNotProgrammed = errors.New("MultiNetworkPolicy rules not programmed")

// policies is the engine's MultiNetworkPolicy side; nil when off.
type policies struct {
	m     *Manager // its locks, records, namespaces and log
	src   PolicySource
	fw    Firewall
	peers LocalPeers // nil: the source takes none
	sink  PolicySink // nil: nothing reported
	links func(path string, ifnames []string, up bool) error

	mu sync.Mutex
	// labels are each sandbox's labels as its runtime gave them (what
	// ApplyPolicy renders with; the source prefers the API's).
	labels map[string]map[string]string
	// local is which sandbox each pod UID's addresses were told from: a
	// stale sandbox's teardown does not forget its successor's.
	local map[string]string
}

func newPolicies(d Deps) *policies {
	if d.Policy == nil || d.Firewall == nil {
		return nil
	}
	p := &policies{src: d.Policy, fw: d.Firewall, links: d.LinksUp, labels: map[string]map[string]string{},
		local: map[string]string{}}
	p.peers, _ = d.Policy.(LocalPeers)
	p.sink, _ = d.Sink.(PolicySink)
	if p.links == nil {
		p.links = netns.SetLinksUp
	}
	return p
}

// marker is what the table's marker says once rs is programmed: nothing
// when rs isolates nothing (no table).
func marker(rs ir.Ruleset) string {
	if rs.Empty() {
		return ""
	}
	return rs.Digest
}

// identity is the policy-for identity of a recorded network: its NAD, else
// its confDir (node) network's name (design §4.3: annotation, defaultNetworks,
// claims and hot-plug alike).
func identity(n state.Network) ir.Identity {
	if n.NAD != "" {
		return ir.Identity{NAD: n.NAD}
	}
	return ir.Identity{Node: n.Name}
}

// interfaces are nets as rendering sees them, with the addresses known.
func interfaces(nets []state.Network) []ir.Interface {
	out := make([]ir.Interface, 0, len(nets))
	for _, n := range nets {
		ifc := ir.Interface{IfName: n.IfName, Identity: identity(n)}
		for _, s := range n.IPs {
			if p, err := netip.ParsePrefix(s); err == nil {
				ifc.IPs = append(ifc.IPs, p.Addr())
			} else if a, err := netip.ParseAddr(s); err == nil {
				ifc.IPs = append(ifc.IPs, a)
			}
		}
		out = append(out, ifc)
	}
	return out
}

// target is the pod of rec with the interfaces nets.
func (p *policies) target(rec *state.Record, nets []state.Network) ir.Target {
	p.mu.Lock()
	labels := p.labels[rec.ID]
	p.mu.Unlock()
	return ir.Target{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID, Labels: labels,
		Interfaces: interfaces(nets)}
}

// remember keeps sb's labels for later renders.
func (p *policies) remember(sb Sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.labels[sb.ID] = maps.Clone(sb.Labels)
}

// program renders rec's pod over nets and programs the result unless the
// record says it is programmed already (force: also when it does). The
// record's digest follows what the kernel has.
func (p *policies) program(ctx context.Context, ns netns.Netns, rec *state.Record, nets []state.Network, force bool) error {
	rs, err := p.render(ctx, rec, nets)
	if err != nil {
		return err
	}
	if !force && rec.Policy != nil && rec.Policy.Digest == marker(rs) {
		return nil
	}
	if err := p.fw.Apply(ctx, ns, rs); err != nil {
		return fmt.Errorf("%w: %w", ErrPolicyNotProgrammed, err)
	}
	recordDigest(rec, rs)
	return nil
}

// render is rec's pod's ruleset over nets; what rendering noted goes to the
// sink.
func (p *policies) render(ctx context.Context, rec *state.Record, nets []state.Network) (ir.Ruleset, error) {
	rs, notes, err := p.src.Render(ctx, p.target(rec, nets))
	if len(notes) > 0 && p.sink != nil {
		p.sink.PolicyNotes(podOf(rec), notes)
	}
	if err != nil {
		return ir.Ruleset{}, fmt.Errorf("%w: rendering: %w", ErrPolicyNotProgrammed, err)
	}
	return rs, nil
}

// recordDigest makes rec say that rs is what the kernel has.
func recordDigest(rec *state.Record, rs ir.Ruleset) {
	if rec.Policy == nil {
		rec.Policy = &state.Policy{}
	}
	rec.Policy.Digest = marker(rs)
}

// programBeside is program for the start of an attach, split so that the
// rules cost the attach almost nothing: it renders and programs the closed
// table (ir.Closed: the same chains, each a single drop; a few messages)
// before it returns, then programs the full ruleset while the caller runs
// the ADDs. Every interface is still born filtered — closed until the full
// rules replace the closed ones in one transaction. wait returns the full
// program's outcome and records its digest in rec; it must be called
// before rec is read or the sandbox's lock released. A render with no
// chains programs nothing beside: it deletes a table as program does.
func (p *policies) programBeside(ctx context.Context, ns netns.Netns, rec *state.Record, nets []state.Network) (wait func() error, err error) {
	rs, err := p.render(ctx, rec, nets)
	if err != nil {
		return nil, err
	}
	first := ir.Closed(rs) // empty when rs is
	if err := p.fw.Apply(ctx, ns, first); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicyNotProgrammed, err)
	}
	if rs.Empty() {
		recordDigest(rec, rs)
		return func() error { return nil }, nil
	}
	done := make(chan error, 1)
	go func() { done <- p.fw.Apply(ctx, ns, rs) }()
	return func() error {
		if err := <-done; err != nil {
			return fmt.Errorf("%w: %w", ErrPolicyNotProgrammed, err)
		}
		recordDigest(rec, rs)
		return nil
	}, nil
}

// tell gives the peer index rec's pod's addresses.
func (p *policies) tell(rec *state.Record) {
	if p.peers == nil || rec.UID == "" {
		return
	}
	p.mu.Lock()
	p.local[rec.UID] = rec.ID
	p.mu.Unlock()
	p.peers.SetLocal(podOf(rec), interfaces(rec.Networks))
}

// forget drops what was kept of sandbox id of pod uid (a teardown: no
// netlink, the table dies with the netns); nil-safe.
func (p *policies) forget(id, uid string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.labels, id)
	mine := uid != "" && p.local[uid] == id
	if mine {
		delete(p.local, uid)
	}
	p.mu.Unlock()
	if mine && p.peers != nil {
		p.peers.ForgetLocal(PolicyPod{UID: uid, SandboxID: id})
	}
}

func podOf(rec *state.Record) PolicyPod {
	return PolicyPod{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID, SandboxID: rec.ID}
}

func (p *policies) warn(rec *state.Record, reason string, err error) {
	if p.sink != nil && rec.Kind == "pod" && rec.UID != "" {
		p.sink.PolicyWarning(podOf(rec), reason, err)
	}
}

// recordedNetns is rec's namespace while it is the one recorded.
func (p *policies) recordedNetns(rec *state.Record) (netns.Netns, bool) {
	if rec.Netns == "" {
		return netns.Netns{}, false
	}
	ns, err := p.m.ns.Check(rec.Netns)
	if err != nil || rec.NetnsIno != 0 && (ns.ID != netns.ID{Dev: rec.NetnsDev, Ino: rec.NetnsIno}) {
		return netns.Netns{}, false
	}
	return ns, true
}

// policyRecord is id's attached record and live namespace, under its lock
// (ok false: nothing to program: no record, not attached, netns gone).
func (p *policies) policyRecord(id string) (*state.Record, netns.Netns, bool, error) {
	rec, err := p.m.store.Get(id)
	if errors.Is(err, state.ErrNotFound) {
		return nil, netns.Netns{}, false, nil
	}
	if err != nil {
		return nil, netns.Netns{}, false, err
	}
	if rec.Phase != state.PhaseAttached || len(rec.Networks) == 0 {
		return nil, netns.Netns{}, false, nil
	}
	ns, ok := p.recordedNetns(rec)
	return rec, ns, ok, nil
}

// apply is Manager.ApplyPolicy.
func (p *policies) apply(ctx context.Context, id string) error {
	return p.withRecord(ctx, id, "MultiNetworkPolicy", func(rec *state.Record, ns netns.Netns) error {
		return p.reprogram(ctx, rec, ns, false)
	})
}

// withRecord runs f on sandbox id's attached record and live namespace,
// under its lock waited for at most BackgroundLockWait (ErrBusy, wrapped
// in what); nothing when off, without an attached record or its netns.
func (p *policies) withRecord(ctx context.Context, id, what string, f func(*state.Record, netns.Netns) error) error {
	if p == nil {
		return nil
	}
	if err := state.ValidID(id); err != nil {
		return err
	}
	release, err := p.m.locks.sandbox(ctx, id, BackgroundLockWait, p.m.margin)
	if err != nil {
		return fmt.Errorf("sandbox %s: %s: %w", short(id), what, err)
	}
	defer release()
	rec, ns, ok, err := p.policyRecord(id)
	if err != nil || !ok {
		return err
	}
	return f(rec, ns)
}

// reprogram is apply with the lock held (force: program whatever the
// digests say).
func (p *policies) reprogram(ctx context.Context, rec *state.Record, ns netns.Netns, force bool) error {
	p.tell(rec) // after a restart: the peer index learns the records
	quarantined := rec.Policy != nil && len(rec.Policy.Quarantined) > 0
	if !force && !quarantined && rec.Policy != nil {
		if kernel, err := p.fw.Digest(ctx, ns); err != nil || kernel != rec.Policy.Digest {
			force = true
		}
	}
	if rec.Policy == nil {
		force = true // never programmed (the feature just turned on)
	}
	unrecorded, before := rec.Policy == nil, orEmpty(rec.Policy).Digest
	if err := p.program(ctx, ns, rec, rec.Networks, force || quarantined); err != nil {
		return fmt.Errorf("%s: %w", recRef(rec), err)
	}
	if quarantined {
		if err := p.links(ns.Path, rec.Policy.Quarantined, true); err != nil {
			return errors.Join(fmt.Errorf("%s: MultiNetworkPolicy: ending the quarantine: %w", recRef(rec), err), p.putPolicy(rec))
		}
		p.logRec(rec).WithField("interfaces", rec.Policy.Quarantined).Info("MultiNetworkPolicy programmed again: quarantined interfaces up")
		rec.Policy.Quarantined = nil
	}
	if !unrecorded && rec.Policy.Digest == before && !quarantined {
		return nil
	}
	return p.putPolicy(rec)
}

func orEmpty(p *state.Policy) *state.Policy {
	if p == nil {
		return &state.Policy{}
	}
	return p
}

func (p *policies) putPolicy(rec *state.Record) error {
	rec.Updated = time.Now().UTC()
	if err := p.m.store.Put(rec); err != nil {
		return fmt.Errorf("%s: MultiNetworkPolicy: %w", recRef(rec), err)
	}
	return nil
}

// quarantine is Manager.Quarantine.
func (p *policies) quarantine(ctx context.Context, id string) error {
	return p.withRecord(ctx, id, "MultiNetworkPolicy quarantine", func(rec *state.Record, ns netns.Netns) error {
		return p.quarantineHeld(ctx, rec, ns)
	})
}

// quarantineHeld is quarantine with the lock held.
func (p *policies) quarantineHeld(ctx context.Context, rec *state.Record, ns netns.Netns) error {
	covered, why := p.covered(ctx, rec)
	if len(covered) == 0 {
		return nil // nothing isolated: nothing the old rules could leave open
	}
	if err := p.links(ns.Path, covered, false); err != nil {
		return fmt.Errorf("%s: MultiNetworkPolicy quarantine: %w", recRef(rec), err)
	}
	if rec.Policy == nil {
		rec.Policy = &state.Policy{}
	}
	rec.Policy.Quarantined = sortedUnion(rec.Policy.Quarantined, covered)
	err := p.putPolicy(rec)
	p.logRec(rec).WithField("interfaces", covered).WithError(why).Error("MultiNetworkPolicy not programmed: interfaces set down until it is")
	p.warn(rec, ReasonPolicyNotEnforced, fmt.Errorf("interfaces %s set down until the rules are programmed", strings.Join(covered, ", ")))
	return err
}

// covered are the interfaces of rec the rules isolate now; all of rec's
// when they cannot be rendered (fail closed), with the error.
func (p *policies) covered(ctx context.Context, rec *state.Record) ([]string, error) {
	rs, _, err := p.src.Render(ctx, p.target(rec, rec.Networks))
	var out []string
	if err != nil {
		for _, n := range rec.Networks {
			out = append(out, n.IfName)
		}
	} else {
		for _, c := range rs.Chains {
			out = append(out, c.IfName)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), err
}

func sortedUnion(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// sandboxes is Manager.PolicySandboxes.
func (p *policies) sandboxes() []string {
	if p == nil {
		return nil
	}
	recs, _ := p.m.store.List()
	var out []string
	for _, rec := range recs {
		if rec.Kind == "pod" && rec.Phase == state.PhaseAttached && len(rec.Networks) > 0 {
			out = append(out, rec.ID)
		}
	}
	return out
}

// checkPolicy compares the marker of rec's table with the record (the
// drift check, its lock held) and reprograms a table that drifted, with a
// Warning Event; if that fails, the covered interfaces are quarantined at
// once (the table may be gone: they would be open). drifted reports a
// mismatch.
func (p *policies) checkPolicy(ctx context.Context, log *logrus.Entry, rec *state.Record) (drifted bool) {
	if p == nil || rec.Policy == nil || len(rec.Policy.Quarantined) > 0 || ctx.Err() != nil {
		return false // off, never programmed or quarantined: kube's queue's
	}
	ns, ok := p.recordedNetns(rec)
	if !ok {
		return false
	}
	kernel, err := p.fw.Digest(ctx, ns)
	if err == nil && kernel == rec.Policy.Digest {
		return false
	}
	if ctx.Err() != nil {
		return false
	}
	why := fmt.Errorf("the table's marker says %q, the record %q", kernel, rec.Policy.Digest)
	if err != nil {
		why = fmt.Errorf("the table's marker is unreadable: %w", err)
	}
	l := log.WithError(why)
	if err := p.reprogram(ctx, rec, ns, true); err != nil {
		l.WithField("reprogram", err.Error()).Error("MultiNetworkPolicy drift: reprogramming failed, quarantining")
		p.warn(rec, ReasonPolicyDrift, fmt.Errorf("%w; reprogramming failed: %w", why, err))
		if qerr := p.quarantineHeld(ctx, rec, ns); qerr != nil {
			l.WithError(qerr).Error("MultiNetworkPolicy drift: quarantine failed")
		}
		return true
	}
	l.Warn("MultiNetworkPolicy drift: the table was reprogrammed")
	p.warn(rec, ReasonPolicyDrift, fmt.Errorf("%w; reprogrammed", why))
	return true
}

// recRef names rec's sandbox in errors.
func recRef(rec *state.Record) string {
	return PodRef(Sandbox{ID: rec.ID, Kind: rec.Kind, Pod: cni.PodIdentity{Namespace: rec.Namespace, Name: rec.Name}})
}

func (p *policies) logRec(rec *state.Record) *logrus.Entry {
	return p.m.log.WithFields(logrus.Fields{"sandbox": rec.ID, "pod": rec.Name, "namespace": rec.Namespace})
}
