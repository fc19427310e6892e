package k8s

// Networks as DRA ResourceClaims on the real kubelet: deploy/base ships the
// driver nri-cni.io on (its DeviceClass, RBAC and policy); pods get networks
// from ResourceClaimTemplates whose requests select a network by the device
// attribute the node publishes.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
	"github.com/nri-cni/nri-cni/test/k8sdra"
)

// TestDRAClaimAttachesAndReports: a pod whose claim asks for the shipped
// network with an interface name and a MAC gets that interface; the claim's
// status.devices carries a Ready condition, networkData (interface, address
// in CIDR form, MAC) and the CNI result; network-status lists it; the API
// requests nri-cni made were the kubelet-driven claim read and the status
// writes (none on the attach path); deleting the pod releases everything.
func TestDRAClaimAttachesAndReports(t *testing.T) {
	f := newFixture(t)
	net := f.w.o.NetName
	devs := f.nodeDevices(net)
	t.Logf("this node publishes %d devices of driver %s", len(devs), dra.DriverName)
	tmpl := harness.RandomName("dra-net-")
	const mac = "02:00:00:d7:a0:01"
	f.claimTemplate("default", tmpl, netRequest{name: "net", network: net, config: `"interface":"dra0","mac":"` + mac + `"`})

	start := time.Now()
	name := harness.RandomName("dra-")
	f.create(f.claimPod(name, "default", nil, tmpl))
	pod := f.waitReady("default", name)
	ready := time.Since(start)
	dra0 := f.iface(pod, "dra0")
	assert.Equal(t, mac, dra0.MAC)
	sec := f.w.o.Secondary()
	assert.True(t, (&nadNet{Subnet: sec.Subnet}).contains(dra0.Addrs[0].String()), "dra0 %s in %s", dra0.Addrs[0], sec.Subnet)

	claims := f.podClaims(pod)
	require.Contains(t, claims, tmpl)
	st := f.claimStatus("default", claims[tmpl], 1)[0]
	t.Logf("pod Ready in %s; claim %s status.devices[0]: %s", ready.Round(time.Millisecond), claims[tmpl], toJSON(st))
	assert.Equal(t, f.w.c.NodeName, st.Pool)
	require.Len(t, st.Conditions, 1)
	assert.Equal(t, "Ready", st.Conditions[0].Type)
	assert.Equal(t, metav1.ConditionTrue, st.Conditions[0].Status)
	assert.Equal(t, "dra0", st.NetworkData.InterfaceName)
	assert.Equal(t, []string{dra0.Addrs[0].String()}, st.NetworkData.IPs)
	assert.Equal(t, mac, st.NetworkData.HardwareAddress)
	require.NotNil(t, st.Data)
	res, err := decodeResult(st.Data.Raw)
	require.NoError(t, err)
	assert.NotEmpty(t, res.CNIVersion)
	assert.Equal(t, dra0.Addrs[0].String(), res.IPs[0].Address, "data is the CNI result")
	if f.serverAtLeast("1.36") {
		assert.NotNil(t, st.ShareID, "one device shared by allocations (KEP-5075, on since 1.36)")
	}

	ns := f.networkStatus("default", name, 2)
	assert.Equal(t, statusEntry{Name: net, Interface: "dra0", IPs: []string{dra0.Addrs[0].IP.String()}, Mac: mac}, ns[1])

	// What nri-cni asked the API server while the pod started: the
	// kubelet's prepare made it read the claim; everything else is status.
	// Requests in other namespaces are not this pod's: an earlier test's
	// pod, failing until its namespace went, had its Events written late
	// (client-go's broadcaster batches them), inside this window.
	events, err := f.w.c.AuditEvents(func(ev cluster.AuditEvent) bool {
		return strings.HasSuffix(ev.User.Username, ":nri-cni") && ev.Stage == "ResponseComplete" &&
			!ev.RequestReceived.Before(start) && (ev.ObjectRef == nil || ev.ObjectRef.Namespace == "" || ev.ObjectRef.Namespace == "default")
	})
	require.NoError(t, err)
	for _, ev := range events {
		if ev.ObjectRef == nil {
			continue
		}
		k := ev.Verb + " " + ev.ObjectRef.Resource + "/" + ev.ObjectRef.Subresource
		switch k {
		case "get resourceclaims/", "patch resourceclaims/status", "patch pods/", "watch network-attachment-definitions/",
			"watch resourceslices/", "list resourceslices/", "update resourceslices/", "create resourceslices/",
			// MultiNetworkPolicy's informers (on in the tier) re-watching.
			"watch namespaces/", "watch multi-networkpolicies/":
		default:
			t.Errorf("unexpected API request by nri-cni while a claim pod started: %s %s", ev.Verb, ev.RequestURI)
		}
	}

	id, _ := f.readySandbox(pod)
	claim, err := f.k.ResourceV1().ResourceClaims("default").Get(f.ctx, claims[tmpl], metav1.GetOptions{})
	require.NoError(t, err)
	assert.Len(t, f.claimFiles(), 1, "the prepared claim is recorded")
	f.deletePod("default", name)
	f.waitReleased(id)
	f.waitClaimsReleased(string(claim.UID))
	assert.Empty(t, sec.IPFilesOf(id), "the claim's address released")
}

// TestDRAUnsatisfiableClaimStaysPending: a network this node cannot attach
// is not published, so a pod claiming it stays unscheduled — no sandbox,
// nothing attached. The NAD exists and the NAD policy allows it, but its
// chain names a plugin (sbr) whose binary this node lacks: nri-cni's check
// keeps it out of the slice (a NAD created after it is published, so the
// driver has seen both), and the scheduler, which sees every node's
// networks, places the pod nowhere. Without the check the pod would get a
// sandbox here and fail its ADD, again and again.
func TestDRAUnsatisfiableClaimStaysPending(t *testing.T) {
	f := newFixture(t)
	broken := harness.RandomName("nad-nosbr-")
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "cni-" + broken, "plugins": []any{
		map[string]any{"type": "bridge", "bridge": k8sdeploy.NADBridge(), "isGateway": false, "ipMasq": false,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": k8sdeploy.NADSubnet()}}}}},
		map[string]any{"type": "sbr"},
	}})
	require.NoError(t, err)
	f.createNAD("default", broken, string(conf))
	good := f.newNAD("default", harness.RandomName("nad-ok-"))
	devs := f.nodeDevices("default/" + good.Name)
	assert.False(t, k8sdra.HasNetwork(devs, "default/"+broken), "a NAD whose plugin sbr is not on the node is not published")
	f.waitFor("nri-cni's log saying why "+broken+" is not published", waitLong, func() (bool, string) {
		for _, l := range strings.Split(f.nriCNILog(), "\n") {
			if strings.Contains(l, "network not published") && strings.Contains(l, broken) && strings.Contains(l, `sbr`) {
				return true, ""
			}
		}
		return false, "no such line"
	})

	for _, network := range []string{"default/" + broken, "no-such-network"} {
		tmpl := harness.RandomName("dra-nope-")
		f.claimTemplate("default", tmpl, netRequest{name: "net", network: network})
		name := harness.RandomName("dra-pending-")
		pod := f.create(f.claimPod(name, "default", nil, tmpl))
		reason, msg := f.podScheduledFalse("default", name)
		t.Logf("claim for %s: PodScheduled=False %s: %s", network, reason, msg)
		assert.Equal(t, corev1.PodReasonUnschedulable, reason)
		assert.Contains(t, msg, "claim")
		time.Sleep(shortWait)
		assert.Empty(t, f.sandboxes(string(pod.UID)), "no sandbox for an unschedulable pod")
	}
	assert.Empty(t, f.claimFiles())
}

// TestDRATwoClaimsAndTheAnnotation: two claims (one for a NAD, one for the
// node network with a MAC) beside the NPWG annotation: the annotation's
// network first, then the claims' in claim order, each with its own status.
func TestDRATwoClaimsAndTheAnnotation(t *testing.T) {
	f := newFixture(t)
	nadA := f.newNAD("default", harness.RandomName("nad-dra-"))
	nadB := f.newNAD("default", harness.RandomName("nad-ann-"))
	f.nodeDevices("default/" + nadA.Name)
	a, b := "a-"+harness.RandomName(""), "b-"+harness.RandomName("")
	f.claimTemplate("default", a, netRequest{name: "nad", network: "default/" + nadA.Name})
	f.claimTemplate("default", b, netRequest{name: "node", network: f.w.o.NetName, config: `"interface":"data0"`})
	name := harness.RandomName("dra-two-")
	f.create(f.claimPod(name, "default", map[string]string{npwgAnnotation: nadB.Name}, a, b))
	pod := f.waitReady("default", name)

	net1, net2, data0 := f.iface(pod, "net1"), f.iface(pod, "net2"), f.iface(pod, "data0")
	assert.True(t, nadB.contains(net1.Addrs[0].String()), "net1: the annotation's NAD")
	assert.True(t, nadA.contains(net2.Addrs[0].String()), "net2: claim %s's NAD", a)
	assert.True(t, (&nadNet{Subnet: f.w.o.Subnet}).contains(data0.Addrs[0].String()), "data0: claim %s's network", b)
	st := f.networkStatus("default", name, 4)
	assert.Equal(t, []string{"default/" + nadB.Name, "default/" + nadA.Name, f.w.o.NetName},
		[]string{st[1].Name, st[2].Name, st[3].Name})
	claims := f.podClaims(pod)
	assert.Equal(t, "net2", f.claimStatus("default", claims[a], 1)[0].NetworkData.InterfaceName)
	assert.Equal(t, "data0", f.claimStatus("default", claims[b], 1)[0].NetworkData.InterfaceName)

	id, _ := f.readySandbox(pod)
	f.deletePod("default", name)
	f.waitReleased(id)
	assert.Empty(t, nadA.ipFiles(id))
	assert.Empty(t, nadB.ipFiles(id))
}

// TestDRAClassConfigWins: the admin's DeviceClass carries a NetworkConfig
// with a MAC; a tenant's claim of that class asks for another MAC and an
// interface name. The class's key wins, the claim's other keys apply: the
// pod gets the claim's interface with the class's MAC.
func TestDRAClassConfigWins(t *testing.T) {
	f := newFixture(t)
	class := harness.RandomName("nri-cni-fixed-mac-")
	const adminMAC, tenantMAC = "02:00:00:c1:a5:01", "02:00:00:7e:4a:01"
	f.deviceClass(class, `"mac":"`+adminMAC+`"`)
	tmpl := harness.RandomName("dra-class-")
	f.claimTemplate("default", tmpl, netRequest{name: "net", network: f.w.o.NetName, class: class,
		config: `"interface":"cls0","mac":"` + tenantMAC + `"`})
	name := harness.RandomName("dra-class-")
	f.create(f.claimPod(name, "default", nil, tmpl))
	pod := f.waitReady("default", name)
	cls0 := f.iface(pod, "cls0")
	assert.Equal(t, adminMAC, cls0.MAC, "the class's mac, not the claim's")
	st := f.claimStatus("default", f.podClaims(pod)[tmpl], 1)[0]
	assert.Equal(t, adminMAC, st.NetworkData.HardwareAddress)
	assert.Equal(t, "cls0", st.NetworkData.InterfaceName)

	id, _ := f.readySandbox(pod)
	f.deletePod("default", name)
	f.waitReleased(id)
}

// TestDRABadConfigNamesClaimAndKey: a NetworkConfig nri-cni refuses fails
// the kubelet's prepare with a message naming the claim and the key; no
// sandbox is made.
func TestDRABadConfigNamesClaimAndKey(t *testing.T) {
	f := newFixture(t)
	tmpl := harness.RandomName("dra-bad-")
	f.claimTemplate("default", tmpl, netRequest{name: "net", network: f.w.o.NetName, config: `"mac":"not-a-mac"`})
	name := harness.RandomName("dra-bad-")
	pod := f.create(f.claimPod(name, "default", nil, tmpl))
	msg := f.waitEvent("default", name, "FailedPrepareDynamicResources", `"mac"`, "ResourceClaim default/"+name)
	t.Logf("FailedPrepareDynamicResources: %s", msg)
	assert.Empty(t, f.sandboxes(string(pod.UID)))
	assert.Empty(t, f.claimFiles())
}

// TestDRAManyPodsShareOneNetwork: pods each with a claim for the same
// network all start (one device with multiple allocations, or slots).
func TestDRAManyPodsShareOneNetwork(t *testing.T) {
	f := newFixture(t)
	tmpl := harness.RandomName("dra-share-")
	f.claimTemplate("default", tmpl, netRequest{name: "net", network: f.w.o.NetName})
	var names []string
	for i := range 4 {
		names = append(names, fmt.Sprintf("%s-%d", harness.RandomName("dra-share-"), i))
		f.create(f.claimPod(names[i], "default", nil, tmpl))
	}
	devices := map[string]bool{}
	for _, n := range names {
		pod := f.waitReady("default", n)
		f.iface(pod, "net1")
		st := f.claimStatus("default", f.podClaims(pod)[tmpl], 1)[0]
		devices[st.Device] = true
	}
	t.Logf("4 claims of one network on %d device(s)", len(devices))
	if f.serverAtLeast("1.36") {
		assert.Len(t, devices, 1, "multiple allocations of one device")
	} else {
		assert.Len(t, devices, 4, "one slot each")
	}
}

// TestDRARestarts: a claim pod keeps its network through restarts of
// nri-cni, the kubelet and containerd (no ADD again), a claim pod created
// while nri-cni is away waits for it and then
// starts with its network, and deleting the pods afterwards releases all.
func TestDRARestarts(t *testing.T) {
	f := newFixture(t)
	w := f.w
	tmpl := harness.RandomName("dra-restart-")
	f.claimTemplate("default", tmpl, netRequest{name: "net", network: w.o.NetName, config: `"interface":"dra0"`})
	name := harness.RandomName("dra-restart-")
	f.create(f.claimPod(name, "default", nil, tmpl))
	pod := f.waitReady("default", name)
	id, st := f.readySandbox(pod)
	addr := f.iface(pod, "dra0").Addrs[0].String()

	f.restartNRICNI()
	// The kubelet restarted.
	w.c.StopKubelet()
	require.NoError(t, w.c.StartKubelet(f.ctx))
	// containerd restarted.
	synced := w.d.Registrations()
	require.NoError(t, w.c.RestartContainerd(f.ctx))
	_, err := w.d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err)
	pod = f.waitReady("default", name)
	id2, st2 := f.readySandbox(pod)
	assert.Equal(t, id, id2, "same sandbox")
	itf, ok, err := harness.PodIface(st2.NetnsPath, "dra0")
	require.NoError(t, err)
	require.True(t, ok, "dra0 still there")
	assert.Equal(t, addr, itf.Addrs[0].String(), "same address")
	assert.Equal(t, st.NetnsPath, st2.NetnsPath)
	assert.Equal(t, 0, countLog(f.nriCNILog(), "network attached", id), "the restarted nri-cni added nothing again")

	// nri-cni away: a new claim pod waits — unprepared (FailedPrepare-
	// DynamicResources) while the node's slice is there, unschedulable once
	// the kubelet has wiped the slice of a driver gone for good — and never
	// starts without its network; back, it starts with it.
	away := `{"spec":{"template":{"spec":{"nodeSelector":{"k8s-test.nri-cni.io/away":"true"}}}}}`
	back := `{"spec":{"template":{"spec":{"nodeSelector":null}}}}`
	restored := false
	t.Cleanup(func() {
		if restored {
			return
		}
		_, _ = w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", back)
		_, _ = w.d.WaitReady(f.ctx, w.d.Registrations()+1, waitLong)
	})
	_, err = w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", away)
	require.NoError(t, err)
	require.NoError(t, w.d.WaitGone(f.ctx, waitLong))
	late := harness.RandomName("dra-late-")
	latePod := f.create(f.claimPod(late, "default", nil, tmpl))
	time.Sleep(shortWait)
	assert.Empty(t, f.readyIDs(string(latePod.UID)), "no ready sandbox while the driver is away")
	synced = w.d.Registrations()
	_, err = w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", back)
	require.NoError(t, err)
	_, err = w.d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err)
	restored = true
	lp := f.waitReady("default", late)
	f.iface(lp, "dra0")

	f.deletePod("default", name)
	f.deletePod("default", late)
	f.waitReleased(f.seenIDs()...)
	f.waitFor("no prepared claims left", waitLong, func() (bool, string) {
		return len(f.claimFiles()) == 0, fmt.Sprintf("%v", f.claimFiles())
	})
}

// TestDRARestartsBetweenPrepareAndRun: the kubelet prepared a pod's claim
// (nri-cni recorded it) but its sandbox keeps failing (the pod's NPWG
// annotation names a NAD not created yet); nri-cni and then the kubelet
// restart before the sandbox runs. When the NAD appears, the kubelet's
// retry runs the sandbox against the restarted nri-cni, which attaches the
// claim from its record on disk — no API call — beside the annotation's NAD.
//
// Issue 32: on a loaded machine the kubelet's retry used to land in the
// moment the restarted nri-cni had registered its DRA driver (so the claim
// was prepared) but was not yet connected to containerd: the sandbox ran
// without nri-cni and the pod went Ready without its networks ("mid0" not
// in the pod). A claim is now prepared only while nri-cni serves the
// runtime, and the pod requires nri-cni (deploy/base's admission policy),
// so the runtime refuses its containers meanwhile. The container exits at
// once if mid0 is missing: a window cannot hide as a Ready pod.
func TestDRARestartsBetweenPrepareAndRun(t *testing.T) {
	f := newFixture(t)
	w := f.w
	tmpl := harness.RandomName("dra-mid-")
	f.claimTemplate("default", tmpl, netRequest{name: "net", network: w.o.NetName, config: `"interface":"mid0"`})
	missing := harness.RandomName("nad-mid-")
	name := harness.RandomName("dra-mid-")
	mid := f.claimPod(name, "default", map[string]string{npwgAnnotation: missing}, tmpl)
	// Exits 1 at its first instruction if mid0 is not there.
	mid.Spec.Containers[0].Command = []string{"/pause", "--require-iface", "mid0"}
	f.create(mid)
	msg := f.waitEvent("default", name, "FailedCreatePodSandBox", "no such NetworkAttachmentDefinition default/"+missing)
	t.Logf("sandbox refused after the claim was prepared: %s", msg)
	require.Len(t, f.claimFiles(), 1, "the prepared claim is recorded")

	f.restartNRICNI()
	w.c.StopKubelet()
	require.NoError(t, w.c.StartKubelet(f.ctx))

	n := f.newNAD("default", missing)
	pod := f.waitReady("default", name)
	for _, cs := range pod.Status.ContainerStatuses {
		assert.Zero(t, cs.RestartCount, "container %s never ran without its networks", cs.Name)
	}
	mid0 := f.iface(pod, "mid0")
	assert.True(t, (&nadNet{Subnet: w.o.Subnet}).contains(mid0.Addrs[0].String()), "mid0 from the claim's network")
	assert.True(t, n.contains(f.iface(pod, "net1").Addrs[0].String()), "net1 from the annotation's NAD")
	claims := f.podClaims(pod)
	assert.Equal(t, "mid0", f.claimStatus("default", claims[tmpl], 1)[0].NetworkData.InterfaceName)

	id, _ := f.readySandbox(pod)
	claim, err := f.k.ResourceV1().ResourceClaims("default").Get(f.ctx, claims[tmpl], metav1.GetOptions{})
	require.NoError(t, err)
	f.deletePod("default", name)
	f.waitReleased(id)
	f.waitClaimsReleased(string(claim.UID))
	assert.Empty(t, n.ipFiles(id))
}
