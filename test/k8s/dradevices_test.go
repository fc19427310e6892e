package k8s

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/fakes/dradriver"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestDRADeviceNetworks: another DRA driver's devices behind NADs, as
// Multus ≥ 4.3.1 and dra-driver-sriov's Multus mode have them. The fake
// DRA driver (registered with the node's kubelet, its ResourceSlice
// publishing k8s.cni.cncf.io/resourceName and k8s.cni.cncf.io/deviceID on
// three devices) allocates a pod two devices through a ResourceClaim; two
// NADs annotated with that resourceName take them in device ID order (the
// first network the first): each ADD carries its device as
// runtimeConfig.deviceID and the config's deviceID, network-status has
// each one's device-info (derived from the PCI address the driver
// publishes), found through the kubelet's PodResources API and the node's
// ResourceSlices (no API call on the attach path). nri-cni restarted, the
// pod deleted: each DEL carries the device its ADD got.
func TestDRADeviceNetworks(t *testing.T) {
	f := newFixture(t)
	o := f.w.o
	require.NotEmpty(t, o.DevicesNamespace, "the overlay's namespace for cni-recorder NADs")
	ns := o.DevicesNamespace
	f.namespace(ns)

	res := testenv.UniqueName("fake.example/dra-nic-")
	d, tmpl := f.startFakeDRA(ns, "nics", dradriver.Options{Devices: 3, ResourceName: res})

	record := filepath.Join(o.RecordDir, harness.RandomName("dra-devices-")+".jsonl")
	nadA, nadB := harness.RandomName("dra-a-"), harness.RandomName("dra-b-")
	for _, n := range []string{nadA, nadB} {
		f.createResourceNAD(ns, n, res, deviceRecorderConfig("cni-"+n, record, false))
	}

	name := harness.RandomName("dra-devices-")
	f.create(f.nicsPod(name, ns, nadA+","+nadB, tmpl))
	f.cleanupOwnPods(ns)
	got := f.waitReadyNotRefused(ns, name)
	sandbox, _ := f.readySandbox(got)

	// The claim's devices, by PCI address: what the driver publishes as
	// k8s.cni.cncf.io/deviceID.
	claimName, allocated := f.allocatedTo(got, d, func(dev dradriver.Device) string { return dev.PCIAddress })
	slices.Sort(allocated)
	t.Logf("pod %s/%s (sandbox %s): claim %s, devices %v", ns, name, sandbox, claimName, allocated)

	want := deviceWant{
		"cni-" + nadA: {"net1", allocated[0]},
		"cni-" + nadB: {"net2", allocated[1]},
	}
	for _, c := range assertADDsGetTheirDevices(t, record, sandbox, want) {
		assert.NotEmpty(t, c.runtime.DeviceInfoFile, "%s: CNIDeviceInfoFile", c.Network)
	}
	entries := f.deviceStatus(ns, name)
	for _, w := range want {
		e, ok := entries[w.ifname]
		require.True(t, ok, "network-status entry of %s: %v", w.ifname, entries)
		require.NotNil(t, e.DeviceInfo, "device-info of %s", w.ifname)
		require.NotNil(t, e.DeviceInfo.Pci, w.ifname)
		assert.Equal(t, w.device, e.DeviceInfo.Pci.PciAddress, "%s: the claimed device's address", w.ifname)
	}

	f.restartNRICNI()
	f.deletePod(ns, name)
	f.waitReleased(sandbox)
	assertDELsGetTheirDevices(t, record, sandbox, want)
}

// TestDRAClaimNamedNetworks: NADs naming the pod's claim and request
// (nri-cni.io/resourceClaim), for a DRA driver that publishes no Multus
// attribute (as dranet). The fake driver backs each device with a dummy
// interface and writes its name as the device's deviceID in the claim's
// status data; the scheduler allocates the pod's claim (from a template,
// found by the pod's name for it) two of them; the two networks of that
// request take them in allocation order, and cni-recorder moves each into
// the pod as net1 and net2. nri-cni restarted, the pod deleted: each DEL
// carries its ADD's device, and the interfaces are back on the host. A
// pod naming a claim it does not have never runs: its sandbox is refused,
// naming the annotation and the claim.
func TestDRAClaimNamedNetworks(t *testing.T) {
	f := newFixture(t)
	o := f.w.o
	require.NotEmpty(t, o.DevicesNamespace, "the overlay's namespace for cni-recorder NADs")
	ns := o.DevicesNamespace
	f.namespace(ns)

	d, tmpl := f.startFakeDRA(ns, "data", dradriver.Options{Devices: 3, Links: true, InterfaceIDs: true})

	record := filepath.Join(o.RecordDir, harness.RandomName("dra-named-")+".jsonl")
	nadA, nadB, nadX := harness.RandomName("named-a-"), harness.RandomName("named-b-"), harness.RandomName("named-x-")
	for n, claim := range map[string]string{nadA: "nics/data", nadB: "nics/data", nadX: "missing/data"} {
		f.createNADWith(ns, n, map[string]string{claimAnnotation: claim}, deviceRecorderConfig("cni-"+n, record, true))
	}

	macs := map[string]string{} // of each device's interface, on the host before the pod
	for _, dev := range d.Devices() {
		macs[dev.Interface] = hostLink(dev.Interface)
		require.NotEmpty(t, macs[dev.Interface], "device %s's interface %s on the host", dev.Name, dev.Interface)
	}
	name := harness.RandomName("dra-named-")
	f.create(f.nicsPod(name, ns, nadA+","+nadB, tmpl))
	f.cleanupOwnPods(ns)
	got := f.waitReadyNotRefused(ns, name)
	sandbox, st := f.readySandbox(got)
	claimName, allocated := f.allocatedTo(got, d, func(dev dradriver.Device) string { return dev.Interface }) // allocation order
	t.Logf("pod %s/%s (sandbox %s): claim %s, interfaces %v", ns, name, sandbox, claimName, allocated)

	want := deviceWant{
		"cni-" + nadA: {"net1", allocated[0]},
		"cni-" + nadB: {"net2", allocated[1]},
	}
	assertADDsGetTheirDevices(t, record, sandbox, want)
	for _, w := range want {
		itf, ok, err := harness.PodIface(st.NetnsPath, w.ifname)
		require.NoError(t, err)
		require.True(t, ok, "%s in the pod", w.ifname)
		assert.Equal(t, macs[w.device], itf.MAC, "%s is interface %s", w.ifname, w.device)
		assert.Empty(t, hostLink(w.device), "interface %s left the host", w.device)
	}

	f.restartNRICNI()
	f.deletePod(ns, name)
	f.waitReleased(sandbox)
	assertDELsGetTheirDevices(t, record, sandbox, want)
	for _, w := range want {
		assert.Equal(t, macs[w.device], hostLink(w.device), "interface %s back on the host", w.device)
	}

	// A claim the pod does not have: refused, naming it; nothing ADDed.
	addsBefore := len(callsOf(t, record, "ADD", ""))
	bad := f.nicsPod(harness.RandomName("dra-named-bad-"), ns, nadX, tmpl)
	f.create(bad)
	msg := f.waitEvent(ns, bad.Name, "NetworkAttachFailed", ns+"/"+nadX, claimAnnotation, `the pod has no such claim "missing"`)
	t.Logf("refused: %s", msg)
	p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, bad.Name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, cs := range p.Status.ContainerStatuses {
		assert.Nil(t, cs.State.Running, "container %s of the pod without the claim never ran", cs.Name)
	}
	assert.Len(t, callsOf(t, record, "ADD", ""), addsBefore, "nothing ADDed for the refused pod")
}

// startFakeDRA starts the fake DRA driver on the node with o (its name,
// node, client and kubelet dir filled in), its DeviceClass, and a claim
// template in ns of two of its devices for request; all undone at cleanup.
func (f *fixture) startFakeDRA(ns, request string, o dradriver.Options) (*dradriver.Driver, string) {
	f.t.Helper()
	o.DriverName = testenv.UniqueName("nic-") + ".fake.example.com"
	o.NodeName, o.Client, o.KubeletDir, o.Logf = f.w.c.NodeName, f.w.c.Client, f.w.c.KubeletRootDir, f.t.Logf
	d, err := dradriver.Start(f.ctx, o)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { assert.NoError(f.t, d.Stop(f.ctx), "stopping the fake DRA driver") })
	_, err = f.k.ResourceV1().DeviceClasses().Create(f.ctx, dradriver.DeviceClass(d.Name()), metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = f.k.ResourceV1().DeviceClasses().Delete(f.ctx, d.Name(), metav1.DeleteOptions{}) })
	tmpl := harness.RandomName("nics-")
	_, err = f.k.ResourceV1().ResourceClaimTemplates(ns).Create(f.ctx, dradriver.ClaimTemplate(ns, tmpl, request, d.Name(), 2), metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = f.k.ResourceV1().ResourceClaimTemplates(ns).Delete(f.ctx, tmpl, metav1.DeleteOptions{}) })
	return d, tmpl
}

// nicsPod is f.pod asking for networks, with the pod claim "nics" made
// from tmpl and used by its container; the test's pods are deleted at
// cleanup.
func (f *fixture) nicsPod(name, ns, networks, tmpl string) *corev1.Pod {
	f.t.Helper()
	pod := f.pod(name, ns, map[string]string{npwgAnnotation: networks})
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nics", ResourceClaimTemplateName: &tmpl}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "nics"}}
	return pod
}

// allocatedTo is what of each of d's devices the pod's one claim was
// allocated, in allocation order (of, e.g., the PCI address).
func (f *fixture) allocatedTo(pod *corev1.Pod, d *dradriver.Driver, of func(dradriver.Device) string) (string, []string) {
	f.t.Helper()
	require.Len(f.t, pod.Status.ResourceClaimStatuses, 1)
	claim, err := f.k.ResourceV1().ResourceClaims(pod.Namespace).Get(f.ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	require.NoError(f.t, err)
	require.NotNil(f.t, claim.Status.Allocation)
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		for _, dev := range d.Devices() {
			if dev.Name == r.Device {
				out = append(out, of(dev))
			}
		}
	}
	require.Len(f.t, out, 2, "the scheduler allocated the claim two of the driver's devices")
	return claim.Name, out
}

// cleanupOwnPods deletes the test's pods of ns at cleanup and waits.
func (f *fixture) cleanupOwnPods(ns string) {
	sel := ownerLabel + "=" + f.owner
	f.t.Cleanup(func() {
		_ = f.k.CoreV1().Pods(ns).DeleteCollection(f.ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
		f.waitPodsGone(ns, "", sel)
	})
}
