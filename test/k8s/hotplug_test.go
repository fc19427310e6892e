package k8s

// Hot-plug on the real kubelet (the overlay turns kubernetes.hotplug on
// and applies deploy/hotplug's RBAC): a running pod's networks follow its
// NPWG annotation, changed with `kubectl annotate --overwrite`.

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
)

// annotate sets (or, with value "-", removes) the pod's NPWG annotation.
func (f *fixture) annotate(name, value string) time.Time {
	f.t.Helper()
	arg := npwgAnnotation + "=" + value
	if value == "-" {
		arg = npwgAnnotation + "-"
	}
	at := time.Now()
	_, err := f.w.c.Kubectl(f.ctx, "annotate", "--overwrite", "pod", "-n", "default", name, arg)
	require.NoError(f.t, err)
	return at
}

// ifaces are the pod's interfaces other than lo and eth0, with addresses.
func (f *fixture) ifaces(netnsPath string, names ...string) map[string]string {
	f.t.Helper()
	out := map[string]string{}
	for _, n := range names {
		itf, ok, err := harness.PodIface(netnsPath, n)
		require.NoError(f.t, err)
		if ok && len(itf.Addrs) > 0 {
			out[n] = itf.Addrs[0].String()
		}
	}
	return out
}

// waitIfaces polls (every 5 ms) until the netns has exactly want among
// names, and returns when that was first seen.
func (f *fixture) waitIfaces(netnsPath string, want []string, names ...string) time.Time {
	f.t.Helper()
	var seen time.Time
	deadline := time.Now().Add(waitLong)
	for {
		got := f.ifaces(netnsPath, names...)
		var have []string
		for n := range got {
			have = append(have, n)
		}
		sort.Strings(have)
		if strings.Join(have, ",") == strings.Join(want, ",") {
			seen = time.Now()
			return seen
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("interfaces %v in %s: have %v (nri-cni log tail:\n%s)", want, netnsPath, have, tailLines(f.nriCNILog(), 15))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestHotplug: net2 added to a running pod (ping over it to a peer on that
// network), net1 removed, everything removed, then added back; the
// network-status follows; a bad value changes nothing and raises a Warning
// Event; latency from the annotate call to the interface appearing in the
// pod, over several additions.
func TestHotplug(t *testing.T) {
	f := newFixture(t)
	a := f.newNAD("default", harness.RandomName("hp-a-"))
	b := f.newNAD("default", harness.RandomName("hp-b-"))
	pod := f.create(f.pod(harness.RandomName("hotplug-"), "default", map[string]string{npwgAnnotation: a.Name}))
	peer := f.create(f.pod(harness.RandomName("hotplug-peer-"), "default", map[string]string{npwgAnnotation: b.Name}))
	p := f.waitReady("default", pod.Name)
	q := f.waitReady("default", peer.Name)
	id, st := f.readySandbox(p)
	peerAddr := f.iface(q, "net1").Addrs[0]
	names := []string{"net1", "net2", "net3"}
	f.waitIfaces(st.NetnsPath, []string{"net1"}, names...)

	// Add net2: the pod reaches the peer over b.
	at := f.annotate(pod.Name, a.Name+", "+b.Name)
	seen := f.waitIfaces(st.NetnsPath, []string{"net1", "net2"}, names...)
	t.Logf("net2 hot-plugged %s after the annotate call", seen.Sub(at).Round(time.Millisecond))
	// The interface shows in the pod before its ADD is done (bridge moves
	// the veth in, then addresses it, then looks its bridge up again): the
	// hot-plug is done when network-status lists net2, which is what the
	// product promises. Pinging before that raced the ADD under load.
	status := f.networkStatus("default", pod.Name, 3)
	got := f.ifaces(st.NetnsPath, names...)
	assert.True(t, b.contains(got["net2"]), "net2 %s from %s", got["net2"], b.Subnet)
	require.NoError(t, harness.Ping(st.NetnsPath, peerAddr.IP), "ping %s over net2", peerAddr.IP)
	assert.Equal(t, "net2", status[2].Interface)
	assert.Equal(t, []string{bareIP(got["net2"])}, status[2].IPs)

	// Remove net1: net2 stays net2, still reachable.
	f.annotate(pod.Name, b.Name)
	f.waitIfaces(st.NetnsPath, []string{"net2"}, names...)
	require.NoError(t, harness.Ping(st.NetnsPath, peerAddr.IP))
	f.waitFor("network-status without net1", waitLong, func() (bool, string) {
		s := f.networkStatusNow("default", pod.Name)
		return len(s) == 2 && s[1].Interface == "net2", toJSON(s)
	})
	assert.Empty(t, a.ipFiles(id), "net1's address released")

	// A bad value: nothing changes, a Warning Event names it.
	missing := harness.RandomName("nad-none-")
	f.annotate(pod.Name, b.Name+", "+missing)
	msg := f.waitEvent("default", pod.Name, "NetworkAttachFailed", "no such NetworkAttachmentDefinition default/"+missing, "nothing changed")
	t.Logf("bad value: %s", msg)
	f.waitIfaces(st.NetnsPath, []string{"net2"}, names...)

	// Remove everything (annotation removed), then add back, several times:
	// the latency of an addition.
	var lat []time.Duration
	for i := 0; i < 8; i++ {
		f.annotate(pod.Name, "-")
		f.waitIfaces(st.NetnsPath, nil, names...)
		at := f.annotate(pod.Name, a.Name)
		lat = append(lat, f.waitIfaces(st.NetnsPath, []string{"net1"}, names...).Sub(at))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("hot-plug latency, annotate call → interface in the pod, %d additions: p50 %s, p95 %s, max %s (kubectl's own start included)",
		len(lat), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*95/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))

	f.deletePod("default", pod.Name)
	f.deletePod("default", peer.Name)
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, a.ipFiles(f.seenIDs()...))
	assert.Empty(t, b.ipFiles(f.seenIDs()...))
	log := f.nriCNILog()
	adds := countLog(log, "network attached", id) + countLog(log, "network attached (hot-plug)", id)
	dels := countLog(log, "network detached", id)
	assert.Equal(t, adds, dels, "every ADD of the pod got one DEL")
	assert.Equal(t, 1+1+8, adds)
}

// TestHotplugRaces: a pod deleted right after its annotation changed ends
// with everything torn down exactly once; an annotation changed while
// nri-cni is away (its DaemonSet pod gone) is applied when it is back, from
// its records and the annotation.
func TestHotplugRaces(t *testing.T) {
	f := newFixture(t)
	a := f.newNAD("default", harness.RandomName("hr-a-"))
	b := f.newNAD("default", harness.RandomName("hr-b-"))

	// Stop racing a hot-plug, several times.
	for i := 0; i < 3; i++ {
		pod := f.create(f.pod(harness.RandomName("hprace-"), "default", map[string]string{npwgAnnotation: a.Name}))
		p := f.waitReady("default", pod.Name)
		id, _ := f.readySandbox(p)
		f.annotate(pod.Name, a.Name+", "+b.Name)
		require.NoError(t, f.k.CoreV1().Pods("default").Delete(f.ctx, pod.Name, metav1.DeleteOptions{}))
		f.waitPodsGone("default", "metadata.name="+pod.Name, "")
		f.waitReleased(id)
		log := f.nriCNILog()
		adds := countLog(log, "network attached", id) + countLog(log, "network attached (hot-plug)", id)
		dels := countLog(log, "network detached", id)
		t.Logf("race %d: %d ADDs, %d DELs for sandbox %.12s", i, adds, dels, id)
		assert.Equal(t, adds, dels, "every ADD got exactly one DEL")
	}
	assert.Empty(t, a.ipFiles(f.seenIDs()...))
	assert.Empty(t, b.ipFiles(f.seenIDs()...))

	// nri-cni away while the annotation changes.
	pod := f.create(f.pod(harness.RandomName("hpaway-"), "default", map[string]string{npwgAnnotation: a.Name}))
	p := f.waitReady("default", pod.Name)
	_, st := f.readySandbox(p)
	d := f.w.d
	synced := d.Registrations()
	_, err := f.w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds", "nri-cni", "--type=merge",
		"-p", `{"spec":{"template":{"spec":{"nodeSelector":{"nri-cni.test/away":"true"}}}}}`)
	require.NoError(t, err)
	back := false
	t.Cleanup(func() {
		if !back {
			_, _ = f.w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds", "nri-cni", "--type=json",
				"-p", `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`)
			_, _ = d.WaitReady(f.ctx, synced+1, waitLong)
		}
	})
	require.NoError(t, d.WaitGone(f.ctx, waitLong))
	f.annotate(pod.Name, a.Name+", "+b.Name)
	time.Sleep(time.Second)
	assert.NotContains(t, f.ifaces(st.NetnsPath, "net2"), "net2", "nothing happens while nri-cni is away")
	_, err = f.w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds", "nri-cni", "--type=json",
		"-p", `[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]`)
	require.NoError(t, err)
	returned := time.Now()
	_, err = d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err)
	back = true
	f.waitIfaces(st.NetnsPath, []string{"net1", "net2"}, "net1", "net2", "net3")
	t.Logf("the change made while nri-cni was away applied %s after its DaemonSet pod was allowed back", time.Since(returned).Round(time.Millisecond))
	f.networkStatus("default", pod.Name, 3)
	f.deletePod("default", pod.Name)
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, b.ipFiles(f.seenIDs()...))
}
