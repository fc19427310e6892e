package attach_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

const podNetns = "/fake/netns/42" // attachtest.Pod's pid 42

// newPolicyFixture: Kubernetes mode with hot-plug, NADs net-a and net-b,
// MultiNetworkPolicy on (scripted source, recording firewall).
func newPolicyFixture(t *testing.T) *attachtest.Fixture {
	kf := newHotplugFixture(t)
	return kf.WithPolicy()
}

// chains are rs's chains as "ifname own-addresses...".
func chains(rs ir.Ruleset) []string {
	var out []string
	for _, c := range rs.Chains {
		s := c.IfName
		for _, r := range c.Rules {
			for _, p := range r.Addrs {
				s += " " + p.Addr().String()
			}
		}
		out = append(out, s)
	}
	return out
}

func policyOf(t *testing.T, kf *attachtest.Fixture, id string) *state.Policy {
	t.Helper()
	rec, err := kf.Store.Get(id)
	require.NoError(t, err)
	return rec.Policy
}

// The planned interfaces are closed before the first ADD (born filtered:
// the rendered chains, each a single drop), their full rules — rendered
// from the pod's identity, labels and the attachments' identities — are
// programmed beside the ADDs and in place when Attach returns; a render
// after the ADDs that differs (here: the fake source allows the pod's own
// addresses) is programmed again; the record keeps the digest and the peer
// index learns the addresses.
func TestPolicyProgrammedBeforeTheFirstADD(t *testing.T) {
	kf := newPolicyFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a, net-b")
	sb.Labels = map[string]string{"app": "web"}
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)

	calls := kf.Firewall.Applied()
	require.Len(t, calls, 3)
	assert.Empty(t, calls[0].Seen, "closed before any ADD")
	assert.Equal(t, podNetns, calls[0].Netns)
	assert.Equal(t, ir.Closed(calls[1].Ruleset), calls[0].Ruleset, "the full rules' chains, each a single drop")
	for _, c := range calls[0].Ruleset.Chains {
		assert.Equal(t, []ir.Rule{{Verdict: ir.Drop, Comment: "closed until the attach completes"}}, c.Rules)
	}
	assert.Equal(t, []string{"net1", "net2"}, chains(calls[1].Ruleset), "the full rules, no addresses yet")
	assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-b net2"}, calls[2].Seen, "the third Apply after the ADDs")
	assert.Equal(t, []string{"net1 10.99.0.5", "net2 10.99.0.5"}, chains(calls[2].Ruleset), "with the pod's own addresses")

	targets := kf.Policy.Rendered()
	require.Len(t, targets, 2)
	tg := targets[0]
	assert.Equal(t, "ns1", tg.Namespace)
	assert.Equal(t, "pod-sb1", tg.Name)
	assert.Equal(t, "uid-sb1", tg.UID)
	assert.Equal(t, map[string]string{"app": "web"}, tg.Labels)
	assert.Equal(t, []ir.Interface{{IfName: "net1", Identity: ir.Identity{NAD: "ns1/net-a"}},
		{IfName: "net2", Identity: ir.Identity{NAD: "ns1/net-b"}}}, tg.Interfaces)

	assert.Equal(t, &state.Policy{Digest: calls[2].Ruleset.Digest}, policyOf(t, kf, "sb1"))
	assert.Equal(t, calls[2].Ruleset.Digest, kf.Firewall.Table(podNetns))
	ip := netip.MustParseAddr("10.99.0.5")
	assert.Equal(t, []ir.Interface{{IfName: "net1", Identity: ir.Identity{NAD: "ns1/net-a"}, IPs: []netip.Addr{ip}},
		{IfName: "net2", Identity: ir.Identity{NAD: "ns1/net-b"}, IPs: []netip.Addr{ip}}}, kf.Policy.Local["uid-sb1"])

	// Teardown: no netlink, and the pod is no peer any more.
	require.NoError(t, kf.Mgr.Detach(context.Background(), sb, true))
	assert.Len(t, kf.Firewall.Applied(), 3, "no Apply at teardown")
	assert.Equal(t, []string{"uid-sb1"}, kf.Policy.Forgot)
	assert.Empty(t, kf.Policy.Local)
}

// Every attachment kind is rendered with its identity (design §4.3): a NAD
// as "namespace/name", a confDir network, a default network and a DRA
// claim's network by what they are.
func TestPolicyIdentitiesOfEachAttachmentKind(t *testing.T) {
	kf := attachtest.NewKube(t, func(c *config.Config) {
		c.Networks, c.DefaultNetworks = nil, []string{"alpha", "kube-system/side"}
	})
	kf.NAD(plan.NADRef{Namespace: "kube-system", Name: "side"}, "cni-side", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	kf.WithPolicy()
	sb := attachtest.NPWGPod("sb1", "net-a")
	kf.Claim(sb, "claim-1", map[string]string{"alpha": `"interface":"data0"`, "ns1/net-a": ""})
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	targets := kf.Policy.Rendered()
	require.NotEmpty(t, targets)
	assert.Equal(t, []ir.Interface{
		{IfName: "net1", Identity: ir.Identity{Node: "alpha"}},           // defaultNetworks: confDir
		{IfName: "net2", Identity: ir.Identity{NAD: "kube-system/side"}}, // defaultNetworks: NAD
		{IfName: "net3", Identity: ir.Identity{NAD: "ns1/net-a"}},        // the annotation
		{IfName: "data0", Identity: ir.Identity{Node: "alpha"}},          // a claim's confDir network
		{IfName: "net4", Identity: ir.Identity{NAD: "ns1/net-a"}},        // a claim's NAD
	}, targets[0].Interfaces)
}

// A rule that cannot be programmed before the ADD fails the sandbox with no
// ADD at all: no record, nothing cached, a failure reported; the next
// attempt attaches.
func TestPolicyApplyErrorFailsBeforeAnyADD(t *testing.T) {
	kf := newPolicyFixture(t)
	kf.Firewall.Fail = func(n int, _ ir.Ruleset) error {
		if n == 1 {
			return errors.New("netlink: no buffer space available")
		}
		return nil
	}
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.ErrorIs(t, err, attach.ErrPolicyNotProgrammed)
	assert.Equal(t, "pod ns1/pod-sb1 (sandbox sb1): MultiNetworkPolicy rules not programmed: netlink: no buffer space available", err.Error())
	assert.Empty(t, kf.AttachCmds(), "no ADD")
	_, gerr := kf.Store.Get("sb1")
	assert.ErrorIs(t, gerr, state.ErrNotFound, "the intent record is gone")
	assert.Zero(t, kf.Cached("sb1"))
	_, failures := kf.Sink.Snapshot()
	require.Len(t, failures, 1)
	assert.ErrorIs(t, failures[0].Err, attach.ErrPolicyNotProgrammed)
	assert.Empty(t, kf.Policy.Local, "no peer")

	// A render that fails is the same.
	kf.Policy.Script(func(ir.Target) (ir.Ruleset, []ir.Note, error) {
		return ir.Ruleset{}, nil, errors.New("render budget")
	})
	_, err = kf.Mgr.Attach(context.Background(), sb)
	require.ErrorIs(t, err, attach.ErrPolicyNotProgrammed)
	assert.Contains(t, err.Error(), "rendering: render budget")
	assert.Empty(t, kf.AttachCmds(), "no ADD")

	kf.Policy.Script(nil)
	_, err = kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	assert.Equal(t, []string{"ADD cni-a net1"}, kf.AttachCmds())
}

// The full rules (programmed beside the ADDs) or the Apply with the pod's
// addresses failing rolls the ADDs back, as a failed ADD does.
func TestPolicyApplyErrorAfterADDRollsBack(t *testing.T) {
	for n, what := range map[int]string{2: "the full rules beside the ADDs", 3: "the rules with the pod's addresses"} {
		t.Run(what, func(t *testing.T) {
			kf := newPolicyFixture(t)
			kf.Firewall.Fail = func(i int, _ ir.Ruleset) error {
				if i == n {
					return errors.New("netns going away")
				}
				return nil
			}
			sb := attachtest.NPWGPod("sb1", "net-a, net-b")
			_, err := kf.Mgr.Attach(context.Background(), sb)
			require.ErrorIs(t, err, attach.ErrPolicyNotProgrammed)
			assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-b net2", "DEL cni-b net2", "DEL cni-a net1"}, kf.AttachCmds())
			_, gerr := kf.Store.Get("sb1")
			assert.ErrorIs(t, gerr, state.ErrNotFound)
			assert.Empty(t, kf.Policy.Local)
		})
	}
}

// A pod with background attach gets no container before its rules are
// programmed: CreateContainer's wait (Background.Wait) does not end while
// the Apply before the ADD has not.
func TestPolicyBackgroundAttachNoContainerBeforeApply(t *testing.T) {
	kf := newPolicyFixture(t)
	block := make(chan struct{})
	kf.Firewall.Block = block
	sb := attachtest.NPWGPod("sb1", "net-a")
	require.True(t, kf.Mgr.Background().Start(sb))
	_, err := kf.Mgr.Background().Wait(attachtest.WithDeadline(t, attach.DefaultMargin+200*time.Millisecond), "sb1")
	require.ErrorIs(t, err, attach.ErrAttachPending, "the container waits")
	assert.Empty(t, kf.AttachCmds(), "no ADD before the rules")
	close(block)
	found, err := kf.Mgr.Background().Wait(attachtest.WithDeadline(t, time.Minute), "sb1")
	require.True(t, found)
	require.NoError(t, err)
	calls := kf.Firewall.Applied()
	require.Len(t, calls, 3)
	assert.Empty(t, calls[0].Seen)
	assert.Equal(t, []string{"ADD cni-a net1"}, kf.AttachCmds())
}

// Hot-plug: the kept and added interfaces' rules are programmed before the
// pending record and the ADD, again with the new addresses before the
// record is confirmed and the status reported; a removal re-renders
// without the removed interface.
func TestPolicyHotplugOrder(t *testing.T) {
	kf := newPolicyFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	kf.Firewall.Mu.Lock()
	kf.Firewall.Seen = func() []string {
		status, _ := kf.Sink.Snapshot()
		return append(kf.AttachCmds(), fmt.Sprintf("record %v", networks(kf, "sb1")), fmt.Sprintf("reports %d", len(status)))
	}
	kf.Firewall.Mu.Unlock()

	_, err = replug(kf, sb, "net-a, net-b")
	require.NoError(t, err)
	calls := kf.Firewall.Applied()
	require.Len(t, calls, 5)
	assert.Equal(t, []string{"ADD cni-a net1", "record [ns1/net-a@net1]", "reports 1"}, calls[3].Seen,
		"before the pending record and the ADD")
	assert.Equal(t, []string{"net1 10.99.0.5", "net2"}, chains(calls[3].Ruleset))
	assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-b net2", "record [ns1/net-a@net1 ns1/net-b@net2 (pending)]", "reports 1"},
		calls[4].Seen, "after the ADD, before the record is confirmed and the status reported")
	assert.Equal(t, []string{"net1 10.99.0.5", "net2 10.99.0.5"}, chains(calls[4].Ruleset))
	status, _ := kf.Sink.Snapshot()
	assert.Len(t, status, 2)
	assert.Equal(t, calls[4].Ruleset.Digest, policyOf(t, kf, "sb1").Digest)

	// Hot-unplug: DEL, then the rules of what is left.
	_, err = replug(kf, sb, "net-b")
	require.NoError(t, err)
	calls = kf.Firewall.Applied()
	require.Len(t, calls, 6)
	assert.Equal(t, "DEL cni-a net1", calls[5].Seen[2])
	assert.Equal(t, []string{"net2 10.99.0.5"}, chains(calls[5].Ruleset))
	assert.Equal(t, calls[5].Ruleset.Digest, policyOf(t, kf, "sb1").Digest)
}

// A hot-plug whose rules cannot be programmed adds nothing: no ADD, no
// pending network; the error is reported.
func TestPolicyHotplugApplyErrorAddsNothing(t *testing.T) {
	for _, failAt := range []int{4, 5} {
		t.Run(fmt.Sprintf("Apply %d fails", failAt), func(t *testing.T) {
			kf := newPolicyFixture(t)
			sb := attachtest.NPWGPod("sb1", "net-a")
			_, err := kf.Mgr.Attach(context.Background(), sb)
			require.NoError(t, err)
			kf.Firewall.Fail = func(n int, _ ir.Ruleset) error {
				if n == failAt {
					return errors.New("ENOMEM")
				}
				return nil
			}
			_, err = replug(kf, sb, "net-a, net-b")
			require.ErrorIs(t, err, attach.ErrPolicyNotProgrammed)
			assert.Equal(t, []string{"ns1/net-a@net1"}, networks(kf, "sb1"))
			want := []string{"ADD cni-a net1"}
			if failAt == 5 { // after the ADD: rolled back
				want = append(want, "ADD cni-b net2", "DEL cni-b net2")
			}
			assert.Equal(t, want, kf.AttachCmds())
		})
	}
}

// ApplyPolicy (kube's queue) programs only what changed: the same digest
// in the record and the table's marker is nothing to do; a changed
// ruleset, or a table changed behind nri-cni's back, is programmed.
func TestApplyPolicyOnlyWhenTheDigestDiffers(t *testing.T) {
	kf := newPolicyFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	ctx := context.Background()

	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	assert.Len(t, kf.Firewall.Applied(), 3, "unchanged: no Apply")

	kf.Firewall.SetTable(podNetns, "someone-else")
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	assert.Len(t, kf.Firewall.Applied(), 4, "the marker differs: programmed")
	assert.Equal(t, policyOf(t, kf, "sb1").Digest, kf.Firewall.Table(podNetns))

	// A policy change: the new ruleset, recorded.
	kf.Policy.Script(func(t ir.Target) (ir.Ruleset, []ir.Note, error) {
		rs := attachtest.Isolating(t)
		rs.Chains = append(rs.Chains, ir.Chain{IfName: "net1", Direction: ir.Egress, Rules: []ir.Rule{{Verdict: ir.Drop}}})
		return attachtest.Digested(rs), []ir.Note{{Namespace: "ns1", Policy: "p1", Reason: "Invalid", Message: "bad cidr"}}, nil
	})
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	calls := kf.Firewall.Applied()
	require.Len(t, calls, 5)
	assert.Equal(t, calls[4].Ruleset.Digest, policyOf(t, kf, "sb1").Digest)
	events := kf.Sink.PolicyEvents()
	require.NotEmpty(t, events)
	assert.Equal(t, "notes", events[len(events)-1].Reason)
	assert.Equal(t, "p1", events[len(events)-1].Notes[0].Policy)

	// A policy deleted: nothing isolated, the table goes, and that is what
	// the record says (no reprogramming on every call).
	kf.Policy.Script(func(ir.Target) (ir.Ruleset, []ir.Note, error) {
		return ir.Ruleset{Digest: "empty"}, nil, nil
	})
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	assert.Len(t, kf.Firewall.Applied(), 6)
	assert.Equal(t, "", kf.Firewall.Table(podNetns))
	assert.Equal(t, "", policyOf(t, kf, "sb1").Digest)

	// Gone or unknown sandboxes are nothing to do.
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "nosuch"))
	require.NoError(t, kf.Mgr.Detach(ctx, sb, false))
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	assert.Len(t, kf.Firewall.Applied(), 6)
}

// A sandbox busy with another operation is not waited for beyond the
// bound: ErrBusy, which the queue requeues on.
func TestApplyPolicyBusy(t *testing.T) {
	kf := newPolicyFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	release, err := kf.Mgr.Hold(context.Background(), "sb1")
	require.NoError(t, err)
	defer release()
	attachtest.WaitFor(t, time.Minute, "ApplyPolicy on a busy sandbox", func() {
		assert.ErrorIs(t, kf.Mgr.ApplyPolicy(context.Background(), "sb1"), attach.ErrBusy)
		assert.ErrorIs(t, kf.Mgr.Quarantine(context.Background(), "sb1"), attach.ErrBusy)
	})
}

// Reprogramming that keeps failing ends in quarantine: the covered
// interfaces go down, recorded, with a Warning Event; the next successful
// ApplyPolicy programs the rules and sets them up again.
func TestPolicyQuarantineAndRecovery(t *testing.T) {
	kf := newPolicyFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a, net-b")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	ctx := context.Background()
	// Only net2 is covered now, and its programming fails.
	kf.Policy.Script(func(t ir.Target) (ir.Ruleset, []ir.Note, error) {
		rs := attachtest.Isolating(t)
		rs.Chains = rs.Chains[1:]
		return attachtest.Digested(rs), nil, nil
	})
	kf.Firewall.Fail = func(int, ir.Ruleset) error { return errors.New("ENOMEM") }
	require.ErrorIs(t, kf.Mgr.ApplyPolicy(ctx, "sb1"), attach.ErrPolicyNotProgrammed)

	require.NoError(t, kf.Mgr.Quarantine(ctx, "sb1"))
	assert.Equal(t, []string{"down net2"}, kf.Links.In(podNetns))
	assert.Equal(t, []string{"net2"}, policyOf(t, kf, "sb1").Quarantined)
	events := kf.Sink.PolicyEvents()
	require.NotEmpty(t, events)
	last := events[len(events)-1]
	assert.Equal(t, attach.ReasonPolicyNotEnforced, last.Reason)
	assert.Equal(t, attach.PolicyPod{Namespace: "ns1", Name: "pod-sb1", UID: "uid-sb1", SandboxID: "sb1"}, last.Pod)
	assert.Contains(t, last.Err.Error(), "net2")

	// The drift check leaves a quarantined pod to the queue.
	n := len(kf.Firewall.Applied())
	kf.Mgr.Check(ctx, "sb1")
	assert.Len(t, kf.Firewall.Applied(), n)

	kf.Firewall.Mu.Lock()
	kf.Firewall.Fail = nil
	kf.Firewall.Mu.Unlock()
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	assert.Equal(t, []string{"down net2", "up net2"}, kf.Links.In(podNetns))
	p := policyOf(t, kf, "sb1")
	assert.Empty(t, p.Quarantined)
	assert.Equal(t, kf.Firewall.Table(podNetns), p.Digest)

	// Set up again even when the digest is what the table has.
	require.NoError(t, kf.Mgr.Quarantine(ctx, "sb1"))
	require.NoError(t, kf.Mgr.ApplyPolicy(ctx, "sb1"))
	assert.Equal(t, []string{"down net2", "up net2", "down net2", "up net2"}, kf.Links.In(podNetns))

	// Unrenderable: every recorded interface goes down (fail closed).
	kf.Policy.Script(func(ir.Target) (ir.Ruleset, []ir.Note, error) {
		return ir.Ruleset{}, nil, errors.New("render budget")
	})
	require.NoError(t, kf.Mgr.Quarantine(ctx, "sb1"))
	assert.Equal(t, []string{"net1", "net2"}, policyOf(t, kf, "sb1").Quarantined)
}

// The periodic drift check compares the table's marker with the record: a
// table flushed behind nri-cni's back is reprogrammed, with a Warning
// Event; an intact one costs one marker read.
func TestPolicyDriftCheck(t *testing.T) {
	kf := newPolicyFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	ctx := context.Background()

	_, failed, busy := kf.Mgr.Check(ctx, "sb1")
	assert.Zero(t, failed)
	assert.False(t, busy)
	assert.Len(t, kf.Firewall.Applied(), 3)

	want := kf.Firewall.Table(podNetns)
	kf.Firewall.SetTable(podNetns, "")
	_, failed, _ = kf.Mgr.Check(ctx, "sb1")
	assert.Equal(t, 1, failed)
	assert.Len(t, kf.Firewall.Applied(), 4)
	assert.Equal(t, want, kf.Firewall.Table(podNetns), "reprogrammed")
	events := kf.Sink.PolicyEvents()
	require.NotEmpty(t, events)
	assert.Equal(t, attach.ReasonPolicyDrift, events[len(events)-1].Reason)
	assert.Empty(t, kf.Links.In(podNetns))

	// Drifted and not reprogrammable: quarantined at once.
	kf.Firewall.SetTable(podNetns, "")
	kf.Firewall.Mu.Lock()
	kf.Firewall.Fail = func(int, ir.Ruleset) error { return errors.New("ENOMEM") }
	kf.Firewall.Mu.Unlock()
	_, failed, _ = kf.Mgr.Check(ctx, "sb1")
	assert.Equal(t, 1, failed)
	assert.Equal(t, []string{"down net1"}, kf.Links.In(podNetns))
	assert.Equal(t, []string{"net1"}, policyOf(t, kf, "sb1").Quarantined)
	events = kf.Sink.PolicyEvents()
	assert.Equal(t, []string{attach.ReasonPolicyDrift, attach.ReasonPolicyNotEnforced},
		[]string{events[len(events)-2].Reason, events[len(events)-1].Reason})
}

// After a restart, the records are kube's queue's to re-check: a table
// whose marker matches the record is not programmed again, and the peer
// index learns the pod's addresses from the record.
func TestPolicyRestartConvergesWithoutReprogramming(t *testing.T) {
	kf := newPolicyFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	src, fw := &attachtest.PolicySource{}, kf.Firewall
	kf.Policy = src
	kf.Mgr = attach.New(kf.Cfg, kf.Deps()) // restarted: same kernel tables

	assert.Equal(t, []string{"sb1"}, kf.Mgr.PolicySandboxes())
	require.NoError(t, kf.Mgr.ApplyPolicy(context.Background(), "sb1"))
	assert.Len(t, fw.Applied(), 3, "no Apply")
	assert.Len(t, src.Local["uid-sb1"], 1, "the peer index learnt the record")
}

// Without a Firewall nothing of this runs.
func TestPolicyOff(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	assert.Nil(t, policyOf(t, kf, "sb1"))
	assert.Nil(t, kf.Mgr.PolicySandboxes())
	assert.NoError(t, kf.Mgr.ApplyPolicy(context.Background(), "sb1"))
	assert.NoError(t, kf.Mgr.Quarantine(context.Background(), "sb1"))
}

// MultiNetworkPolicy turned off: nri-cni (now without the feature) deletes
// the tables it programmed, sets quarantined interfaces up again and
// clears the records; pods it never programmed are not touched.
func TestRemovePoliciesWhenTurnedOff(t *testing.T) {
	kf := newPolicyFixture(t)
	_, err := kf.Mgr.Attach(context.Background(), attachtest.NPWGPod("sb1", "net-a"))
	require.NoError(t, err)
	require.NoError(t, kf.Mgr.Quarantine(context.Background(), "sb1"))
	require.NotNil(t, policyOf(t, kf, "sb1"))
	fw, links := kf.Firewall, kf.Links
	before := len(fw.Applied())

	off := attach.New(kf.Cfg, attach.Deps{Engine: kf.Engine, Netns: kf.Netns, Store: kf.Store})
	removed, err := off.RemovePolicies(context.Background(), fw, links.SetUp)
	require.NoError(t, err)
	assert.Equal(t, 1, removed)
	calls := fw.Applied()
	require.Len(t, calls, before+1)
	assert.True(t, calls[before].Ruleset.Empty(), "the table deleted (an empty ruleset)")
	assert.Equal(t, "", fw.Table(podNetns))
	assert.Nil(t, policyOf(t, kf, "sb1"), "the record's policy cleared")
	assert.Contains(t, links.In(podNetns), "up net1", "the quarantine ended")

	removed, err = off.RemovePolicies(context.Background(), fw, links.SetUp)
	require.NoError(t, err)
	assert.Zero(t, removed, "nothing left to remove")
	assert.Len(t, fw.Applied(), before+1)
}
