package attach_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

func newHotplugFixture(t *testing.T) *attachtest.Fixture {
	kf := attachtest.NewKube(t, func(c *config.Config) { c.Kubernetes.Hotplug = true })
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-b"}, "cni-b", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "broken"}, "cni-broken", map[string]any{"failOn": "ADD", "failMsg": "pool exhausted"})
	return kf
}

// replug sends the pod's new annotation value.
func replug(kf *attachtest.Fixture, sb attach.Sandbox, value string) (bool, error) {
	kf.T.Helper()
	return kf.Mgr.Replug(context.Background(), attach.PodUpdate{UID: sb.Pod.UID, Namespace: sb.Pod.Namespace, Name: sb.Pod.Name,
		Annotations: map[string]string{plan.AnnotationNPWGNetworks: value}, Changed: true})
}

func networks(kf *attachtest.Fixture, id string) []string {
	kf.T.Helper()
	rec, err := kf.Store.Get(id)
	require.NoError(kf.T, err)
	var out []string
	for _, n := range rec.Networks {
		s := n.NAD + "@" + n.IfName
		if n.Pending {
			s += " (pending)"
		}
		out = append(out, s)
	}
	return out
}

func TestHotplugAddsRemovesAndKeepsInterfaceNames(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)

	changed, err := replug(kf, sb, "net-a, net-b")
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"ns1/net-a@net1", "ns1/net-b@net2"}, networks(kf, "sb1"))

	// net-a goes; net-b keeps net2 although, alone, it would be net1.
	_, err = replug(kf, sb, "net-b")
	require.NoError(t, err)
	assert.Equal(t, []string{"ns1/net-b@net2"}, networks(kf, "sb1"))

	// Unchanged: nothing happens.
	changed, err = replug(kf, sb, "net-b")
	require.NoError(t, err)
	assert.False(t, changed)

	// An explicit interface name is part of the match: moving net-b to eth7
	// re-attaches it; net-a comes back as net1.
	_, err = replug(kf, sb, "net-b@eth7, net-a")
	require.NoError(t, err)
	assert.Equal(t, []string{"ns1/net-b@eth7", "ns1/net-a@net1"}, networks(kf, "sb1"))

	// Everything removed (an empty annotation opts out).
	_, err = replug(kf, sb, "")
	require.NoError(t, err)
	assert.Empty(t, networks(kf, "sb1"))

	assert.Equal(t, []string{
		"ADD cni-a net1",
		"ADD cni-b net2",
		"DEL cni-a net1",
		"DEL cni-b net2", "ADD cni-b eth7", "ADD cni-a net1",
		"DEL cni-a net1", "DEL cni-b eth7",
	}, kf.Cmds())

	status, failures := kf.Sink.Snapshot()
	assert.Empty(t, failures)
	require.Len(t, status, 5, "the attach and each hot-plug that changed something")
	last := status[len(status)-1]
	require.Len(t, last.Networks, 1, "only the runtime's network is left")
	mid := status[3]
	require.Len(t, mid.Networks, 3)
	assert.Equal(t, "eth7", mid.Networks[1].Interface)

	// Stop tears down what the record has, once.
	require.NoError(t, kf.Mgr.Detach(context.Background(), sb, false))
	changed, err = replug(kf, sb, "net-a")
	require.NoError(t, err)
	assert.False(t, changed, "no hot-plug into a stopped sandbox")
}

func TestHotplugBadValueChangesNothing(t *testing.T) {
	for _, value := range []string{
		"net-a, missing",             // unknown NAD
		"other/net-a",                // another namespace
		`[{"name":"net-a","mac":1}]`, // malformed
		`[{"name":"net-b","default-route":["10.1.0.1"]}]`, // not by hot-plug
	} {
		t.Run(value, func(t *testing.T) {
			kf := newHotplugFixture(t)
			sb := attachtest.NPWGPod("sb1", "net-a")
			_, err := kf.Mgr.Attach(context.Background(), sb)
			require.NoError(t, err)
			changed, err := replug(kf, sb, value)
			require.Error(t, err)
			assert.ErrorIs(t, err, attach.ErrHotplugRefused)
			assert.Contains(t, err.Error(), "nothing changed")
			assert.False(t, changed)
			assert.Equal(t, []string{"ADD cni-a net1"}, kf.Cmds(), "no CNI call")
			assert.Equal(t, []string{"ns1/net-a@net1"}, networks(kf, "sb1"))
			_, failures := kf.Sink.Snapshot()
			require.Len(t, failures, 1, "a Warning Event")
		})
	}
}

// A restarted nri-cni hands every pod over again; while its NAD cache is
// still filling, that is no verdict on the pod: an error to retry (not a
// refusal), nothing changed, no Warning Event.
func TestHotplugWaitsForTheNADCache(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	kf.Src.Mu.Lock()
	kf.Src.Unsynced = true
	kf.Src.Mu.Unlock()
	for _, changedAnnotation := range []bool{false, true} {
		_, err = kf.Mgr.Replug(context.Background(), attach.PodUpdate{UID: sb.Pod.UID, Namespace: sb.Pod.Namespace, Name: sb.Pod.Name,
			Annotations: map[string]string{plan.AnnotationNPWGNetworks: "net-a, net-b"}, Changed: changedAnnotation})
		require.ErrorIs(t, err, plan.ErrSourceNotSynced)
		assert.NotErrorIs(t, err, attach.ErrHotplugRefused, "retried, not refused")
	}
	_, failures := kf.Sink.Snapshot()
	assert.Empty(t, failures, "no Warning Event")
	assert.Equal(t, []string{"ns1/net-a@net1"}, networks(kf, "sb1"))

	kf.Src.Mu.Lock()
	kf.Src.Unsynced = false
	kf.Src.Mu.Unlock()
	changed, err := replug(kf, sb, "net-a, net-b")
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"ns1/net-a@net1", "ns1/net-b@net2"}, networks(kf, "sb1"))
}

func TestHotplugFailedADDRollsBackOnlyItsOwn(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	_, err = replug(kf, sb, "net-a, net-b, broken")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pool exhausted")
	assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-b net2", "ADD cni-broken net3", "DEL cni-broken net3", "DEL cni-b net2"},
		kf.Cmds(), "this hot-plug's ADDs rolled back; net-a stays")
	assert.Equal(t, []string{"ns1/net-a@net1"}, networks(kf, "sb1"))
}

func TestHotplugRedoesPendingNetworks(t *testing.T) {
	// nri-cni died between recording a hot-plugged network and its ADD: the
	// resync's Replug (annotation unchanged) DELs it and adds it again.
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "net-a, net-b")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	rec, err := kf.Store.Get("sb1")
	require.NoError(t, err)
	rec.Networks[1].Pending = true
	require.NoError(t, kf.Store.Put(rec))

	changed, err := kf.Mgr.Replug(context.Background(), attach.PodUpdate{UID: sb.Pod.UID, Namespace: "ns1", Name: sb.Pod.Name,
		Annotations: sb.Annotations})
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"ADD cni-a net1", "ADD cni-b net2", "DEL cni-b net2", "ADD cni-b net2"}, kf.Cmds())
	assert.Equal(t, []string{"ns1/net-a@net1", "ns1/net-b@net2"}, networks(kf, "sb1"))
}

func TestHotplugPodWithoutNetworksAtStart(t *testing.T) {
	kf := newHotplugFixture(t)
	sb := attachtest.NPWGPod("sb1", "")
	sb.Annotations = nil
	rec, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	assert.Nil(t, rec, "nothing requested (requireAnnotation)")

	// A resync of a pod with no record does nothing...
	changed, err := kf.Mgr.Replug(context.Background(), attach.PodUpdate{UID: sb.Pod.UID, Annotations: map[string]string{plan.AnnotationNPWGNetworks: "net-a"}})
	require.NoError(t, err)
	assert.False(t, changed)
	// ...the annotation changing attaches.
	_, err = replug(kf, sb, "net-a")
	require.NoError(t, err)
	assert.Equal(t, []string{"ns1/net-a@net1"}, networks(kf, "sb1"))
	require.NoError(t, kf.Mgr.Detach(context.Background(), sb, true))
	assert.Equal(t, []string{"ADD cni-a net1", "DEL cni-a net1"}, kf.Cmds())
	_, err = kf.Store.Get("sb1")
	assert.ErrorIs(t, err, state.ErrNotFound)
}

func TestHotplugOffDoesNothing(t *testing.T) {
	kf := attachtest.NewKube(t, nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-a"}, "cni-a", nil)
	kf.NAD(plan.NADRef{Namespace: "ns1", Name: "net-b"}, "cni-b", nil)
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	changed, err := replug(kf, sb, "net-a, net-b")
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, []string{"ADD cni-a net1"}, kf.Cmds())
}

func TestHotplugLeavesPodsAloneOnConfigChanges(t *testing.T) {
	// Multus installed on the node after nri-cni attached a pod's NPWG
	// networks: a resync's reconcile must not detach them (the plan for a
	// new pod would be "Multus's", i.e. empty).
	kf := newHotplugFixture(t)
	primary := ""
	kf.Multus = func() string { return primary }
	kf.Reconfigure(func(*config.Config) {})
	sb := attachtest.NPWGPod("sb1", "net-a")
	_, err := kf.Mgr.Attach(context.Background(), sb)
	require.NoError(t, err)
	primary = "/etc/cni/net.d/00-multus.conf"
	for _, changed := range []bool{false, true} {
		got, err := kf.Mgr.Replug(context.Background(), attach.PodUpdate{UID: sb.Pod.UID, Namespace: "ns1", Name: sb.Pod.Name,
			Annotations: map[string]string{plan.AnnotationNPWGNetworks: "net-a, net-b"}, Changed: changed})
		require.NoError(t, err)
		assert.False(t, got)
	}
	assert.Equal(t, []string{"ns1/net-a@net1"}, networks(kf, "sb1"))
	assert.Equal(t, []string{"ADD cni-a net1"}, kf.Cmds())
}
