package k8s

// Kubernetes mode on the real kubelet: deploy/base ships it on (in-cluster
// credentials, NODE_NAME, the NPWG annotation honoured), so these pods use
// NetworkAttachmentDefinitions and k8s.v1.cni.cncf.io/networks exactly as a
// Multus user's pods do, and read k8s.v1.cni.cncf.io/network-status back
// through the API.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// TestNPWGNetworksAndStatus: both forms of the NPWG annotation attach their
// NADs (one with a spec.config, one empty = the confDir network of that
// name), with the JSON form's interface name, MAC and cni-args; each pod's
// network-status lists the runtime's network first (default) and then each
// attachment with the addresses and MAC seen in the pod; during all of it
// nri-cni's identity made no read of the API server (audit log): the attach
// path reads its cache, the only requests are the status patches.
func TestNPWGNetworksAndStatus(t *testing.T) {
	f := newFixture(t)
	a := f.newNAD("default", harness.RandomName("nad-a-"))
	// Empty spec.config: the network of the object's name in confDir (the
	// shipped example network).
	f.createNAD("default", f.w.o.NetName, "")
	// A second NAD carries the pod's default route (its subnet's .1).
	b := f.newNAD("default", harness.RandomName("nad-b-"))
	// The DRA driver republishes the node's networks after a NAD change:
	// wait for that before the window in which only status patches may
	// happen.
	for _, n := range []string{a.Name, b.Name, f.w.o.NetName} {
		f.nodeDevices("default/" + n)
	}

	start := time.Now()
	comma := f.create(f.pod(harness.RandomName("npwg-comma-"), "default",
		map[string]string{npwgAnnotation: a.Name + ", default/" + f.w.o.NetName + "@eth5"}))
	const mac = "02:42:0a:0b:0c:0d"
	gw := strings.TrimSuffix(b.Subnet, "0/24") + "1"
	jsonForm := f.create(f.pod(harness.RandomName("npwg-json-"), "default", map[string]string{npwgAnnotation: fmt.Sprintf(
		`[{"name": %q, "interface": "blue", "mac": %q, "cni-args": {"team": "red"}},
		  {"name": %q, "interface": "green", "default-route": [%q]}]`, a.Name, mac, b.Name, gw)}))

	c := f.waitReady("default", comma.Name)
	net1 := f.iface(c, "net1")
	eth5 := f.iface(c, "eth5")
	assert.True(t, a.contains(net1.Addrs[0].String()), "net1 %s in the NAD's subnet %s", net1.Addrs[0].String(), a.Subnet)
	sec := f.w.o.Secondary()
	assert.True(t, (&nadNet{Subnet: sec.Subnet}).contains(eth5.Addrs[0].String()), "eth5 %s in the confDir network's subnet", eth5.Addrs[0].String())

	st := f.networkStatus("default", c.Name, 3)
	t.Logf("network-status of %s: %+v", c.Name, st)
	assert.Equal(t, statusEntry{Name: "default", Interface: "eth0", IPs: []string{c.Status.PodIP}, Default: true}, st[0],
		"entry 0: the runtime's network, its IP as the kubelet reports it")
	assert.Equal(t, statusEntry{Name: "default/" + a.Name, Interface: "net1", IPs: []string{net1.Addrs[0].IP.String()}, Mac: net1.MAC}, st[1])
	assert.Equal(t, statusEntry{Name: "default/" + f.w.o.NetName, Interface: "eth5", IPs: []string{eth5.Addrs[0].IP.String()}, Mac: eth5.MAC}, st[2])

	j := f.waitReady("default", jsonForm.Name)
	blue := f.iface(j, "blue")
	assert.Equal(t, mac, blue.MAC, "the element's mac (tuning's capability)")
	green := f.iface(j, "green")
	stj := f.networkStatus("default", j.Name, 3)
	assert.Equal(t, statusEntry{Name: "default/" + a.Name, Interface: "blue", IPs: []string{blue.Addrs[0].IP.String()}, Mac: mac}, stj[1])
	assert.Equal(t, statusEntry{Name: "default/" + b.Name, Interface: "green", IPs: []string{green.Addrs[0].IP.String()}, Mac: green.MAC,
		Gateway: []string{gw}, DefaultRoute: []string{gw}}, stj[2], "the default route as gateway (what the NPWG client library reads) and default-route")
	jid, jst := f.readySandbox(j)
	routes, err := netns.DefaultRoutes(jst.NetnsPath)
	require.NoError(t, err)
	assert.Equal(t, []string{gw + " dev green"}, routes, "the pod's default route moved from eth0 to green")
	cached := cachedConfig(t, filepath.Join(f.w.o.CacheDir, "results", a.CNIName+"-"+jid+"-blue"))
	assert.Contains(t, cached, `"team":"red"`, "cni-args in the config libcni cached (DEL sees them too)")
	end := time.Now()

	// The API requests nri-cni's identity made while the pods were created,
	// attached and reported: status patches of these two pods only.
	events, err := f.w.c.AuditEvents(func(ev cluster.AuditEvent) bool {
		return strings.HasSuffix(ev.User.Username, ":nri-cni") && ev.Stage == "ResponseComplete" &&
			!ev.RequestReceived.Before(start) && !ev.RequestReceived.After(end)
	})
	require.NoError(t, err)
	byKind := map[string]int{}
	for _, ev := range events {
		k := ev.Verb
		if ev.ObjectRef != nil {
			k += " " + ev.ObjectRef.Resource + " " + ev.ObjectRef.Name
		}
		byKind[k]++
		if ev.Verb == "watch" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "network-attachment-definitions" {
			continue // the informer renewing its watch (every few minutes; not per pod)
		}
		ok := ev.Verb == "patch" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "pods" &&
			(ev.ObjectRef.Name == c.Name || ev.ObjectRef.Name == j.Name)
		assert.True(t, ok, "an API request by nri-cni during the attaches that is not a status patch: %s %s", ev.Verb, ev.RequestURI)
	}
	t.Logf("API requests by nri-cni from the first pod's creation to the last status read (%s): %d %v", end.Sub(start).Round(time.Millisecond), len(events), byKind)

	f.deletePod("default", c.Name)
	f.deletePod("default", j.Name)
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, a.ipFiles(f.seenIDs()...), "the NAD network's addresses released")
	assert.Empty(t, b.ipFiles(f.seenIDs()...))
}

// cachedConfig is the network config libcni cached for an attachment.
func cachedConfig(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err, "libcni cache entry")
	var entry struct {
		Config []byte `json:"config"`
	}
	require.NoError(t, json.Unmarshal(data, &entry))
	if len(entry.Config) == 0 {
		return string(data)
	}
	if dec, err := base64.StdEncoding.DecodeString(string(entry.Config)); err == nil {
		return string(dec)
	}
	return string(entry.Config)
}

// TestNPWGIsolationAndRecovery: a NAD of another namespace fails the pod
// naming the reference (FailedCreatePodSandBox with nri-cni's message, and
// nri-cni's own NetworkAttachFailed Warning), unless that namespace is
// shared; a NAD that does not exist yet fails the pod until it is created,
// then the kubelet's retry attaches it.
func TestNPWGIsolationAndRecovery(t *testing.T) {
	f := newFixture(t)
	other := harness.RandomName("nad-other-")
	f.namespace(other)
	f.newNAD(other, "private")
	shared := f.w.o.SharedNamespace
	f.namespace(shared)
	s := f.newNAD(shared, "common")

	denied := f.create(f.pod(harness.RandomName("npwg-denied-"), "default", map[string]string{npwgAnnotation: other + "/private"}))
	sharedPod := f.create(f.pod(harness.RandomName("npwg-shared-"), "default", map[string]string{npwgAnnotation: shared + "/common"}))
	missing := harness.RandomName("nad-later-")
	later := f.create(f.pod(harness.RandomName("npwg-later-"), "default", map[string]string{npwgAnnotation: missing}))

	msg := f.waitEvent("default", denied.Name, "FailedCreatePodSandBox", other+"/private", "namespace not allowed")
	t.Logf("denied: %s", msg)
	msg = f.waitEvent("default", denied.Name, "NetworkAttachFailed", other+"/private")
	t.Logf("nri-cni's event: %s", msg)

	p := f.waitReady("default", sharedPod.Name)
	assert.True(t, s.contains(f.iface(p, "net1").Addrs[0].String()), "net1 from the shared namespace's NAD")
	f.networkStatus("default", p.Name, 2)

	msg = f.waitEvent("default", later.Name, "FailedCreatePodSandBox", "no such NetworkAttachmentDefinition default/"+missing)
	t.Logf("missing: %s", msg)
	n := f.newNAD("default", missing)
	created := time.Now()
	p = f.waitReady("default", later.Name)
	t.Logf("Ready %s after its NAD was created (kubelet backoff included)", since(created))
	assert.True(t, n.contains(f.iface(p, "net1").Addrs[0].String()))

	d, err := f.k.CoreV1().Pods("default").Get(f.ctx, denied.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodPending, d.Status.Phase, "the denied pod never ran")
	for _, name := range []string{denied.Name, sharedPod.Name, later.Name} {
		f.deletePod("default", name)
	}
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, s.ipFiles(f.seenIDs()...))
	assert.Empty(t, n.ipFiles(f.seenIDs()...))
}

// TestNPWGAsMultusUsersWriteIt: an element written the NPWG v1.3 way for
// Multus — an ipam-claim-reference (kubevirt-ipam-controller adds one to VMs
// with persistent IPs), an empty default-route and another implementation's
// reverse-domain key — starts the pod with its network; the claim nri-cni
// does not use is told to the pod's owner with a Warning Event
// (IPAMClaimNotUsed) naming the claim, not in silence and not by failing
// the pod.
func TestNPWGAsMultusUsersWriteIt(t *testing.T) {
	f := newFixture(t)
	n := f.newNAD("default", harness.RandomName("nad-v13-"))
	claim := harness.RandomName("vm-ipam-")
	pod := f.create(f.pod(harness.RandomName("npwg-v13-"), "default", map[string]string{npwgAnnotation: fmt.Sprintf(
		`[{"name": %q, "interface": "pod1", "ipam-claim-reference": %q, "default-route": [], "org.example.vm-flavor": "big"}]`,
		n.Name, claim)}))
	p := f.waitReady("default", pod.Name)
	pod1 := f.iface(p, "pod1")
	assert.True(t, n.contains(pod1.Addrs[0].String()), "pod1 %s from the NAD's own IPAM", pod1.Addrs[0])
	_, st := f.readySandbox(p)
	routes, err := netns.DefaultRoutes(st.NetnsPath)
	require.NoError(t, err)
	for _, r := range routes {
		assert.NotContains(t, r, "dev pod1", "default-route [] moves nothing")
	}
	msg := f.waitEvent("default", pod.Name, "IPAMClaimNotUsed", claim, "pod1")
	t.Logf("IPAMClaimNotUsed: %s", msg)
	for _, ev := range f.events("default", pod.Name) {
		assert.NotContains(t, ev, "org.example.vm-flavor", "an extension key is a debug log, not an Event")
	}
	ns := f.networkStatus("default", pod.Name, 2)
	assert.Equal(t, "pod1", ns[1].Interface)

	f.deletePod("default", pod.Name)
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, n.ipFiles(f.seenIDs()...))
}

// TestNADChangedAndDeleted: a NAD changed after a pod attached affects new
// pods only; deleted, it fails new pods naming it, while the pods attached
// before are torn down with the config libcni cached at their ADD (both
// addresses released, from both subnets).
func TestNADChangedAndDeleted(t *testing.T) {
	f := newFixture(t)
	n := f.newNAD("default", harness.RandomName("nad-change-"))
	first := f.create(f.pod(harness.RandomName("nad-first-"), "default", map[string]string{npwgAnnotation: n.Name}))
	p1 := f.waitReady("default", first.Name)
	addr1 := f.iface(p1, "net1").Addrs[0].String()
	require.True(t, n.contains(addr1))

	// Another bridge and subnet, same CNI network name.
	changed := &nadNet{Namespace: n.Namespace, Name: n.Name, CNIName: n.CNIName, Bridge: k8sdeploy.NADBridge(),
		Subnet: k8sdeploy.NADSubnet(), f: f}
	t.Cleanup(func() { _ = deleteLink(changed.Bridge) })
	nads := f.nads().K8sCniCncfIoV1().NetworkAttachmentDefinitions("default")
	obj, err := nads.Get(f.ctx, n.Name, metav1.GetOptions{})
	require.NoError(t, err)
	obj.Spec.Config = bridgeConfig(changed.CNIName, changed.Bridge, changed.Subnet)
	_, err = nads.Update(f.ctx, obj, metav1.UpdateOptions{})
	require.NoError(t, err)
	// The informer's watch delivers the change over loopback in
	// milliseconds; a second pod made at once could still race it.
	time.Sleep(2 * time.Second)

	second := f.create(f.pod(harness.RandomName("nad-second-"), "default", map[string]string{npwgAnnotation: n.Name}))
	p2 := f.waitReady("default", second.Name)
	addr2 := f.iface(p2, "net1").Addrs[0].String()
	assert.True(t, changed.contains(addr2), "the new pod gets the changed config: %s in %s", addr2, changed.Subnet)
	_, st := f.readySandbox(p1)
	itf, ok, err := harness.PodIface(st.NetnsPath, "net1")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, addr1, itf.Addrs[0].String(), "the first pod keeps what it has")

	f.deleteNAD("default", n.Name)
	time.Sleep(2 * time.Second)
	third := f.create(f.pod(harness.RandomName("nad-third-"), "default", map[string]string{npwgAnnotation: n.Name}))
	f.waitEvent("default", third.Name, "FailedCreatePodSandBox", "no such NetworkAttachmentDefinition default/"+n.Name)

	for _, name := range []string{first.Name, second.Name, third.Name} {
		f.deletePod("default", name)
	}
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, n.ipFiles(f.seenIDs()...), "both addresses released, DEL from libcni's cached configs")
	for _, br := range []string{n.Bridge, changed.Bridge} {
		ports, err := harness.BridgePorts(br)
		require.NoError(t, err)
		assert.Zero(t, ports, "no veth left on %s", br)
	}
}

// TestMultusAsPrimaryNetwork: on a node whose runtime's first CNI config is
// Multus (here a stand-in 00-multus.conf in the dir the DaemonSet mounts
// as /etc/cni), Multus has attached the NPWG networks before nri-cni sees
// the pod: nri-cni attaches none of them and writes no network-status, so
// the two never attach the same network. Removed, nri-cni takes over.
func TestMultusAsPrimaryNetwork(t *testing.T) {
	f := newFixture(t)
	n := f.newNAD("default", harness.RandomName("nad-multus-"))
	dir := filepath.Join(f.w.o.CNIConf, "net.d")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	conf := filepath.Join(dir, "00-multus.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim"}`), 0o644))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	pod := f.create(f.pod(harness.RandomName("npwg-multus-"), "default", map[string]string{npwgAnnotation: n.Name}))
	p := f.waitReady("default", pod.Name)
	id, st := f.readySandbox(p)
	_, ok, err := harness.PodIface(st.NetnsPath, "net1")
	require.NoError(t, err)
	assert.False(t, ok, "no net1 from nri-cni")
	assert.NotContains(t, p.Annotations, statusAnnotation, "network-status is Multus's")
	log := f.nriCNILog()
	assert.Contains(t, log, "is Multus's on this node", "nri-cni says why")
	assert.Equal(t, 0, countLog(log, "network attached", id))

	require.NoError(t, os.Remove(conf))
	after := f.create(f.pod(harness.RandomName("npwg-nomultus-"), "default", map[string]string{npwgAnnotation: n.Name}))
	p = f.waitReady("default", after.Name)
	assert.True(t, n.contains(f.iface(p, "net1").Addrs[0].String()))
	f.networkStatus("default", p.Name, 2)
	f.deletePod("default", pod.Name)
	f.deletePod("default", after.Name)
	f.waitReleased(f.seenIDs()...)
}
