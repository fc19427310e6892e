package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/fakes/deviceplugin"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// resourceNameAnnotation makes a NAD take, per pod, a device of a device
// plugin resource the kubelet allocated to the pod.
const resourceNameAnnotation = "k8s.v1.cni.cncf.io/resourceName"

// claimAnnotation is nri-cni's NAD annotation naming a claim request.
const claimAnnotation = "nri-cni.io/resourceClaim"

// TestDevicePluginNetworks: two NADs annotated with a device plugin
// resource (the fake device plugin's, registered with the node's kubelet:
// three veth-backed devices, each a host link named as its ID, and their
// NPWG device-info files under nri-cni's kubernetes.deviceInfoDir) whose
// plugin (cni-recorder, moveDevice) moves the device it is given into the
// pod. A pod with two of the resource and both networks gets the kubelet's
// devices in sorted order (the first network the first): each ADD carries
// its device as runtimeConfig.deviceID and the config's deviceID, and the
// CNIDeviceInfoFile seeded from the device plugin's file; the devices are
// the pod's net1 and net2; network-status has each one's device-info.
// nri-cni and the kubelet restarted, the pod deleted: each DEL carries the
// device its ADD got (nri-cni's record) and the devices are back on the
// host. A pod naming the networks without the resource never runs: its
// sandbox is refused with an error naming the NAD, the resource and the
// annotation.
func TestDevicePluginNetworks(t *testing.T) {
	f := newFixture(t)
	o := f.w.o
	require.NotEmpty(t, o.DevicesNamespace, "the overlay's namespace for cni-recorder NADs")
	require.NotEmpty(t, o.PodResourcesSocket, "nri-cni reads the node kubelet's PodResources socket")
	ns := o.DevicesNamespace
	f.namespace(ns)

	// 1. The device plugin, its files where nri-cni looks for them.
	paths := f.w.c.KubeletPaths()
	require.NoError(t, paths.Check())
	require.Equal(t, paths.PodResourcesSocket, o.PodResourcesSocket)
	res := testenv.UniqueName("fake.example/nic-")
	dp, err := deviceplugin.Start(f.ctx, deviceplugin.Config{ResourceName: res, Count: 3, Dir: paths.DevicePluginDir,
		DevInfoDir: o.DeviceInfoDir})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dp.Stop(), "stopping the device plugin") })
	devs := dp.DeviceIDs()
	t.Logf("device plugin %s: devices %v, files under %s", res, devs, filepath.Join(o.DeviceInfoDir, "dp"))
	macs := map[string]string{}
	for _, id := range devs {
		l, err := netlink.LinkByName(id)
		require.NoError(t, err, "the device plugin's device %s is a host link", id)
		macs[id] = l.Attrs().HardwareAddr.String()
	}
	f.waitAllocatable(res, 3)

	// 2. Two NADs of the resource; the plugin writes under the overlay's
	// RecordDir (bound into the node root the plugins run chrooted in).
	record := filepath.Join(o.RecordDir, harness.RandomName("devices-")+".jsonl")
	t.Cleanup(func() { _ = os.Remove(record) })
	nadA, nadB := harness.RandomName("dev-a-"), harness.RandomName("dev-b-")
	for _, n := range []string{nadA, nadB} {
		f.createResourceNAD(ns, n, res, recorderConfig("cni-"+n, record))
	}

	// Pods of the namespace go before the NADs and the device plugin (the
	// cleanups run last first): their DELs give the devices back.
	sel := ownerLabel + "=" + f.owner
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range devs {
				t.Logf("device %s on the host: %t", id, hostLink(id) != "")
			}
			data, _ := os.ReadFile(record)
			t.Logf("cni-recorder's calls:\n%s", data)
		}
		_ = f.k.CoreV1().Pods(ns).DeleteCollection(f.ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
		f.waitPodsGone(ns, "", sel)
	})

	// 3. A pod with two devices and both networks.
	name := harness.RandomName("devices-")
	f.create(f.devicePod(name, ns, res, 2, nadA+","+nadB))
	pod := f.waitReadyNotRefused(ns, name)
	sandbox, st := f.readySandbox(pod)
	var allocated []string
	for _, a := range dp.Allocations() {
		for _, ids := range a.Containers {
			allocated = append(allocated, ids...)
		}
	}
	slices.Sort(allocated)
	require.Len(t, allocated, 2, "the kubelet allocated the pod two devices: %v", dp.Allocations())
	t.Logf("pod %s/%s (sandbox %s) has devices %v", ns, name, sandbox, allocated)

	want := deviceWant{
		"cni-" + nadA: {"net1", allocated[0]},
		"cni-" + nadB: {"net2", allocated[1]},
	}
	infoFiles := map[string]string{}
	for _, c := range assertADDsGetTheirDevices(t, record, sandbox, want) {
		w := want[c.Network]
		assert.Equal(t, filepath.Join(o.DeviceInfoDir, "cni"), filepath.Dir(c.runtime.DeviceInfoFile),
			"%s: CNIDeviceInfoFile under kubernetes.deviceInfoDir", c.Network)
		assert.Contains(t, filepath.Base(c.runtime.DeviceInfoFile), sandbox+"_"+w.ifname, c.Network)
		infoFiles[c.Network] = c.runtime.DeviceInfoFile
	}
	for _, w := range want {
		itf, ok, err := harness.PodIface(st.NetnsPath, w.ifname)
		require.NoError(t, err)
		require.True(t, ok, "%s in the pod", w.ifname)
		assert.Equal(t, macs[w.device], itf.MAC, "%s is device %s", w.ifname, w.device)
		assert.Empty(t, hostLink(w.device), "device %s left the host", w.device)
	}
	for _, file := range infoFiles {
		assert.FileExists(t, file, "the attachment's device-info file, seeded from the device plugin's")
	}
	f.networkStatus(ns, name, 3)
	entries := f.deviceStatus(ns, name)
	for cniName, w := range want {
		e, ok := entries[w.ifname]
		require.True(t, ok, "network-status entry of %s: %v", w.ifname, entries)
		assert.Equal(t, ns+"/"+strings.TrimPrefix(cniName, "cni-"), e.Name)
		assert.Equal(t, macs[w.device], e.Mac, "%s's MAC reported", w.ifname)
		require.NotNil(t, e.DeviceInfo, "device-info of %s", w.ifname)
		var dpInfo nadv1.DeviceInfo
		data, err := os.ReadFile(dp.DevInfoPath(w.device))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &dpInfo))
		assert.Equal(t, dpInfo.Type, e.DeviceInfo.Type, w.ifname)
		require.NotNil(t, e.DeviceInfo.Pci, "%s: a pci device-info, as the device plugin wrote it", w.ifname)
		assert.Equal(t, dpInfo.Pci.PciAddress, e.DeviceInfo.Pci.PciAddress, "%s: device %s's device-info", w.ifname, w.device)
	}

	// 4. nri-cni and the kubelet restarted; the pod keeps its devices.
	f.restartNRICNI()
	registered, _ := dp.Registrations()
	f.w.c.StopKubelet()
	require.NoError(t, f.w.c.StartKubelet(f.ctx))
	f.waitFor("the device plugin registered with the restarted kubelet", waitLong, func() (bool, string) {
		n, err := dp.Registrations()
		return n > registered, fmt.Sprintf("%d registrations (had %d), last error %v", n, registered, err)
	})
	f.waitAllocatable(res, 3)
	pod = f.waitReady(ns, name)
	again, st := f.readySandbox(pod)
	require.Equal(t, sandbox, again, "the same sandbox after the restarts")
	for _, w := range want {
		_, ok, err := harness.PodIface(st.NetnsPath, w.ifname)
		require.NoError(t, err)
		assert.True(t, ok, "%s still in the pod", w.ifname)
	}

	f.deletePod(ns, name)
	f.waitReleased(sandbox)
	assertDELsGetTheirDevices(t, record, sandbox, want)
	for _, w := range want {
		assert.Equal(t, macs[w.device], hostLink(w.device), "device %s back on the host", w.device)
	}
	for n, file := range infoFiles {
		assert.NoFileExists(t, file, "%s's device-info file removed at DEL", n)
	}

	// 5. Without the resource: refused, naming the NAD, the resource and
	// the annotation; nothing ADDed.
	addsBefore := len(callsOf(t, record, "ADD", ""))
	bare := f.create(f.devicePod(harness.RandomName("nodevice-"), ns, "", 0, nadA+","+nadB))
	// nri-cni's Warning Event (the runtime's own error, FailedCreatePodSandBox
	// or a failed container create under the await hook, carries the same text).
	msg := f.waitEvent(ns, bare.Name, "NetworkAttachFailed", ns+"/"+nadA, res, resourceNameAnnotation)
	t.Logf("refused: %s", msg)
	p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, bare.Name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, cs := range p.Status.ContainerStatuses {
		assert.Nil(t, cs.State.Running, "container %s of the pod without the resource never ran", cs.Name)
		assert.False(t, cs.Ready, cs.Name)
	}
	assert.Len(t, callsOf(t, record, "ADD", ""), addsBefore, "no ADD for the pod without devices")
	assert.Empty(t, f.nodeFiles(f.sandboxes(string(bare.UID))...), "a refused sandbox leaves nothing on the node")
}

// deviceWant is a network's interface and device, by its CNI name.
type deviceWant map[string]struct{ ifname, device string }

// assertADDsGetTheirDevices: one ADD of each network of want for the
// sandbox, with its interface and its device (runtimeConfig.deviceID and
// the config's deviceID); the ADDs.
func assertADDsGetTheirDevices(t *testing.T, record, sandbox string, want deviceWant) []recordedCall {
	t.Helper()
	adds := callsOf(t, record, "ADD", sandbox)
	require.Len(t, adds, len(want), "one ADD per network for the sandbox")
	for _, c := range adds {
		w, ok := want[c.Network]
		require.True(t, ok, "ADD of %s", c.Network)
		assert.Equal(t, w.ifname, c.IfName, c.Network)
		assert.Equal(t, w.device, c.runtime.DeviceID, "%s: runtimeConfig.deviceID (capability deviceID)", c.Network)
		assert.Equal(t, w.device, c.DeviceID, "%s: the config's deviceID", c.Network)
	}
	return adds
}

// assertDELsGetTheirDevices: the sandbox's DELs, one or more of each
// network of want, each with the device its ADD got.
func assertDELsGetTheirDevices(t *testing.T, record, sandbox string, want deviceWant) {
	t.Helper()
	dels := callsOf(t, record, "DEL", sandbox)
	require.NotEmpty(t, dels, "DELs for the sandbox")
	seen := map[string]bool{}
	for _, c := range dels {
		w, ok := want[c.Network]
		require.True(t, ok, "DEL of %s", c.Network)
		seen[c.Network] = true
		assert.Equal(t, w.ifname, c.IfName, c.Network)
		assert.Equal(t, w.device, c.runtime.DeviceID, "%s: DEL's runtimeConfig.deviceID is the ADD's", c.Network)
		assert.Equal(t, w.device, c.DeviceID, "%s: DEL's config deviceID is the ADD's", c.Network)
	}
	assert.Len(t, seen, len(want), "a DEL of each network")
}

// createResourceNAD creates a NAD of device plugin resource res (the
// annotation); the cleanup deletes it.
func (f *fixture) createResourceNAD(ns, name, res, config string) {
	f.t.Helper()
	f.createNADWith(ns, name, map[string]string{resourceNameAnnotation: res}, config)
}

// createNADWith creates a NAD of config with annotations, deleted at the
// end of the test.
func (f *fixture) createNADWith(ns, name string, annotations map[string]string, config string) {
	f.t.Helper()
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{ownerLabel: f.owner}, Annotations: annotations},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
	_, err := f.nads().K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Create(f.ctx, nad, metav1.CreateOptions{})
	require.NoError(f.t, err, "NAD %s/%s", ns, name)
	f.t.Cleanup(func() { f.deleteNAD(ns, name) })
}

// recorderConfig is a conflist of cni-recorder moving its device into the
// pod, declaring the device capabilities as Multus users' NADs do (no
// deviceID key of its own: the NAD policy refuses one; nri-cni writes it
// into the plugin's config). The node's NAD policy must let the capability
// names through ("capabilities": {"deviceID": true, "CNIDeviceInfoFile":
// true}); waitReadyNotRefused says so at once if it does not.
func recorderConfig(cniName, record string) string {
	return deviceRecorderConfig(cniName, record, true)
}

// deviceRecorderConfig is recorderConfig, moving the device or only
// recording it (a DRA fake device has no link named as its ID).
func deviceRecorderConfig(cniName, record string, move bool) string {
	data, _ := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": cniName,
		"plugins": []any{map[string]any{"type": k8sdeploy.RecorderType, "recordFile": record, "moveDevice": move,
			"capabilities": map[string]bool{"deviceID": true, "CNIDeviceInfoFile": true}}},
	})
	return string(data)
}

// devicePod is f.pod asking for n of res (none when n is 0) and the NPWG
// networks.
func (f *fixture) devicePod(name, ns, res string, n int64, networks string) *corev1.Pod {
	p := f.pod(name, ns, map[string]string{npwgAnnotation: networks})
	if n > 0 {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}
	}
	return p
}

// waitAllocatable waits until the node advertises n of res.
func (f *fixture) waitAllocatable(res string, n int64) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("the node advertises %d %s", n, res), waitLong, func() (bool, string) {
		node, err := f.k.CoreV1().Nodes().Get(f.ctx, f.w.c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := node.Status.Allocatable[corev1.ResourceName(res)]
		return q.Value() == n, "allocatable " + q.String()
	})
}

// waitReadyNotRefused is waitReady that fails at once, with nri-cni's
// message, when the pod's sandbox is refused by the NAD policy (which a
// retry does not change).
func (f *fixture) waitReadyNotRefused(ns, name string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.waitFor("pod "+ns+"/"+name+" Ready", waitLong, func() (bool, string) {
		for _, ev := range f.events(ns, name) {
			if strings.HasPrefix(ev, "FailedCreatePodSandBox: ") && strings.Contains(ev, "nadPolicy") {
				f.t.Fatalf("pod %s/%s: a NAD refused by nri-cni's policy: %s", ns, name, ev)
			}
		}
		p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return k8sdeploy.PodReady(p), fmt.Sprintf("phase %s, conditions %v, events %q", p.Status.Phase, p.Status.Conditions,
			f.events(ns, name))
	})
	return pod
}

// deviceEntry is a network-status entry with its device-info.
type deviceEntry struct {
	Name       string            `json:"name"`
	Interface  string            `json:"interface"`
	Mac        string            `json:"mac"`
	DeviceInfo *nadv1.DeviceInfo `json:"device-info"`
}

// deviceStatus is the pod's network-status by interface.
func (f *fixture) deviceStatus(ns, name string) map[string]deviceEntry {
	f.t.Helper()
	p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
	require.NoError(f.t, err)
	var entries []deviceEntry
	require.NoError(f.t, json.Unmarshal([]byte(p.Annotations[statusAnnotation]), &entries), "%s", p.Annotations[statusAnnotation])
	out := map[string]deviceEntry{}
	for _, e := range entries {
		out[e.Interface] = e
	}
	return out
}

// recordedCall is a cni-recorder call with its runtimeConfig decoded.
type recordedCall struct {
	testenv.Call
	runtime struct {
		DeviceID       string `json:"deviceID"`
		DeviceInfoFile string `json:"CNIDeviceInfoFile"`
	}
}

// callsOf are the recorded calls cmd of the sandbox ("": of any). A last line without
// its newline is a call being written (nri-cni's periodic CHECKs): left out.
func callsOf(t *testing.T, record, cmd, sandbox string) []recordedCall {
	t.Helper()
	data, err := os.ReadFile(record)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	} else {
		data = nil
	}
	var out []recordedCall
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rc recordedCall
		require.NoError(t, json.Unmarshal(line, &rc.Call), "%s: %s", record, line)
		if rc.Cmd != cmd || (sandbox != "" && rc.ContainerID != sandbox) {
			continue
		}
		if len(rc.RuntimeConfig) > 0 {
			require.NoError(t, json.Unmarshal(rc.RuntimeConfig, &rc.runtime), "%s", rc.RuntimeConfig)
		}
		out = append(out, rc)
	}
	return out
}

// hostLink is the MAC of the host's link name ("" when there is none).
func hostLink(name string) string {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return ""
	}
	return l.Attrs().HardwareAddr.String()
}
