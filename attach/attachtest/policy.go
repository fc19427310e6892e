package attachtest

// MultiNetworkPolicy fakes: a scripted PolicySource and a recording
// Firewall, and the fixture's wiring of them (WithPolicy).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol/ir"
)

// PolicySource is a scripted attach.PolicySource (and attach.LocalPeers):
// Rules, if set, answers each Render; else Isolating. It keeps every
// target rendered and what it was told of local peers.
type PolicySource struct {
	Mu      sync.Mutex
	Rules   func(t ir.Target) (ir.Ruleset, []ir.Note, error)
	Targets []ir.Target
	Local   map[string][]ir.Interface
	Forgot  []string
}

// Render implements attach.PolicySource.
func (s *PolicySource) Render(_ context.Context, t ir.Target) (ir.Ruleset, []ir.Note, error) {
	s.Mu.Lock()
	s.Targets = append(s.Targets, t)
	rules := s.Rules
	s.Mu.Unlock()
	if rules == nil {
		return Isolating(t), nil, nil
	}
	return rules(t)
}

// SetLocal implements attach.LocalPeers.
func (s *PolicySource) SetLocal(pod attach.PolicyPod, ifs []ir.Interface) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.Local == nil {
		s.Local = map[string][]ir.Interface{}
	}
	s.Local[pod.UID] = ifs
}

// ForgetLocal implements attach.LocalPeers.
func (s *PolicySource) ForgetLocal(pod attach.PolicyPod) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	delete(s.Local, pod.UID)
	s.Forgot = append(s.Forgot, pod.UID)
}

// Script replaces Rules.
func (s *PolicySource) Script(rules func(t ir.Target) (ir.Ruleset, []ir.Note, error)) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Rules = rules
}

// Rendered is a copy of the targets rendered so far.
func (s *PolicySource) Rendered() []ir.Target {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return slices.Clone(s.Targets)
}

// Isolating is a ruleset isolating every interface of t for ingress,
// allowing its own addresses (once known) and nothing else.
func Isolating(t ir.Target) ir.Ruleset {
	var rs ir.Ruleset
	for _, ifc := range t.Interfaces {
		c := ir.Chain{IfName: ifc.IfName, Direction: ir.Ingress}
		for _, ip := range ifc.IPs {
			c.Rules = append(c.Rules, ir.Rule{Addrs: []netip.Prefix{netip.PrefixFrom(ip, ip.BitLen())}, Verdict: ir.Accept,
				Comment: "own address"})
		}
		c.Rules = append(c.Rules, ir.Rule{Verdict: ir.Drop})
		rs.Chains = append(rs.Chains, c)
	}
	return Digested(rs)
}

// Digested is rs with its Digest set from its content.
func Digested(rs ir.Ruleset) ir.Ruleset {
	rs.Digest = ""
	sum := sha256.Sum256([]byte(fmt.Sprintf("%v", rs.Chains)))
	rs.Digest = "test-" + hex.EncodeToString(sum[:8])
	return rs
}

// FirewallCall is one Apply: where, what, and what Seen said then.
type FirewallCall struct {
	Netns   string
	Ruleset ir.Ruleset
	Seen    []string
}

// Firewall is a recording attach.Firewall over fake tables (netns path →
// digest). Fail, if set, answers each Apply first (n counts Apply calls
// from 1; nil: programmed); Seen, if set, is recorded with each call (the
// CNI calls made by then). Block, if set, holds every Apply until closed.
type Firewall struct {
	Mu        sync.Mutex
	Calls     []FirewallCall
	Tables    map[string]string
	Fail      func(n int, rs ir.Ruleset) error
	DigestErr error
	Digests   int // Digest calls
	Seen      func() []string
	Block     chan struct{}
}

// Apply implements attach.Firewall.
func (f *Firewall) Apply(ctx context.Context, ns netns.Netns, rs ir.Ruleset) error {
	f.Mu.Lock()
	seen, block := f.Seen, f.Block
	f.Mu.Unlock()
	var s []string
	if seen != nil {
		s = seen()
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Calls = append(f.Calls, FirewallCall{Netns: ns.Path, Ruleset: rs, Seen: s})
	if f.Fail != nil {
		if err := f.Fail(len(f.Calls), rs); err != nil {
			return err
		}
	}
	if f.Tables == nil {
		f.Tables = map[string]string{}
	}
	if rs.Empty() {
		delete(f.Tables, ns.Path)
	} else {
		f.Tables[ns.Path] = rs.Digest
	}
	return nil
}

// Digest implements attach.Firewall.
func (f *Firewall) Digest(_ context.Context, ns netns.Netns) (string, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Digests++
	if f.DigestErr != nil {
		return "", f.DigestErr
	}
	return f.Tables[ns.Path], nil
}

// Applied is a copy of the Apply calls so far.
func (f *Firewall) Applied() []FirewallCall {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return slices.Clone(f.Calls)
}

// Table is the digest programmed in the netns at path ("" none).
func (f *Firewall) Table(path string) string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.Tables[path]
}

// SetTable changes the table at path behind nri-cni's back ("" deletes it).
func (f *Firewall) SetTable(path, digest string) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Tables == nil {
		f.Tables = map[string]string{}
	}
	if digest == "" {
		delete(f.Tables, path)
		return
	}
	f.Tables[path] = digest
}

// Links records the quarantine's link changes ("down net1" / "up net1"),
// per netns path; Err, if set, answers every call.
type Links struct {
	Mu    sync.Mutex
	Calls map[string][]string
	Err   error
}

// SetUp is an attach.Deps.LinksUp.
func (l *Links) SetUp(path string, ifnames []string, up bool) error {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.Err != nil {
		return l.Err
	}
	if l.Calls == nil {
		l.Calls = map[string][]string{}
	}
	verb := "down"
	if up {
		verb = "up"
	}
	for _, n := range ifnames {
		l.Calls[path] = append(l.Calls[path], verb+" "+n)
	}
	return nil
}

// In are the link changes made in the netns at path.
func (l *Links) In(path string) []string {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	return slices.Clone(l.Calls[path])
}

// WithPolicy rebuilds the fixture's Manager with MultiNetworkPolicy on: a
// scripted source, a recording firewall (each Apply records the CNI calls
// made by then) and recorded link changes.
func (f *Fixture) WithPolicy() *Fixture {
	f.Policy, f.Firewall, f.Links = &PolicySource{}, &Firewall{}, &Links{}
	f.Firewall.Seen = f.AttachCmds
	f.Mgr = attach.New(f.Cfg, f.Deps())
	return f
}

// PolicyEvent is what the Sink was told by the policy side: Reason is a
// Warning Event's reason, or "notes" for rendering's notes.
type PolicyEvent struct {
	Pod    attach.PolicyPod
	Reason string
	Err    error
	Notes  []ir.Note
}

// PolicyNotes implements attach.PolicySink.
func (s *Sink) PolicyNotes(pod attach.PolicyPod, notes []ir.Note) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = append(s.policy, PolicyEvent{Pod: pod, Reason: "notes", Notes: notes})
}

// PolicyWarning implements attach.PolicySink.
func (s *Sink) PolicyWarning(pod attach.PolicyPod, reason string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = append(s.policy, PolicyEvent{Pod: pod, Reason: reason, Err: err})
}

// PolicyEvents returns what the policy side reported so far.
func (s *Sink) PolicyEvents() []PolicyEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.policy)
}
