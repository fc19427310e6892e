package cluster_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube/dradevice"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/fakes/dradriver"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestClusterFakeDRADriver: the tests' fake DRA driver (another driver
// than nri-cni.io) registers with the real kubelet through its root dir's
// plugins_registry and publishes its devices; the scheduler allocates one
// to a pod's claim, the kubelet has the driver prepare it (status.devices
// data written) and the pod runs; dradevice finds the device's ID from
// the claim and the published slice; deleting the pod unprepares the
// claim, and Stop removes the driver's slice and interfaces.
func TestClusterFakeDRADriver(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tools, err := cluster.EnsureTools(ctx)
	require.NoError(t, err)
	c, err := cluster.Start(ctx, cluster.Opts{Tools: tools, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet log tail:\n%s", tail(c.KubeletLog(), 60))
		}
		assert.NoError(t, c.Close(context.Background()))
	})

	d, err := dradriver.Start(ctx, dradriver.Options{NodeName: c.NodeName, Client: c.Client, KubeletDir: c.KubeletRootDir,
		Devices: 2, Links: true, ResourceName: "example.com/fake_nic", Logf: t.Logf})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			assert.NoError(t, d.Stop(context.Background()))
		}
	})

	require.Eventually(t, func() bool {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, s := range l.Items {
			if s.Spec.Driver == d.Name() && len(s.Spec.Devices) == 2 {
				return true
			}
		}
		return false
	}, time.Minute, 200*time.Millisecond, "the driver's slice published")

	const ns = "default"
	_, err = c.Client.ResourceV1().DeviceClasses().Create(ctx, dradriver.DeviceClass(d.Name()), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, dradriver.ClaimTemplate(ns, "fake-nic", "nic", d.Name(), 1), metav1.CreateOptions{})
	require.NoError(t, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "with-nic", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "nic"}}}}},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "nic", ResourceClaimTemplateName: new("fake-nic")}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	created := time.Now()
	pod, err = c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			pod = p
			return true
		}
		return false
	}, 2*time.Minute, 200*time.Millisecond, "pod never Running")
	t.Logf("pod with the fake driver's claim: create → Running in %s", time.Since(created).Round(time.Millisecond))

	require.Len(t, pod.Status.ResourceClaimStatuses, 1)
	claimName := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	claim, err := c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, d.Prepared(), claim.UID, "the kubelet had the driver prepare the claim")
	require.Len(t, claim.Status.Devices, 1)
	var data dradriver.Data
	require.NoError(t, json.Unmarshal(claim.Status.Devices[0].Data.Raw, &data))
	var dev dradriver.Device
	for _, x := range d.Devices() {
		if x.Name == claim.Status.Devices[0].Device {
			dev = x
		}
	}
	assert.Equal(t, dradriver.Data{InterfaceName: dev.Interface, PCIAddress: dev.PCIAddress}, data)
	_, err = netlink.LinkByName(dev.Interface)
	assert.NoError(t, err, "the device's interface exists on the host")

	// What a device-backed network would hand its CNI chain.
	sl, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var slices dradevice.StaticSlices
	for i := range sl.Items {
		slices = append(slices, &sl.Items[i])
	}
	r := &dradevice.Resolver{Slices: slices}
	devs, err := r.Resolve(claim, dradevice.Ref{Request: "nic", PodClaimName: "nic", PodUID: pod.UID})
	require.NoError(t, err)
	require.Len(t, devs, 1)
	assert.Equal(t, dev.PCIAddress, devs[0].DeviceID)
	assert.Equal(t, dradevice.SourceData, devs[0].Source)
	assert.Equal(t, "example.com/fake_nic", devs[0].ResourceName)
	byName, err := r.ByResourceName([]*resourceapi.ResourceClaim{claim}, pod.UID, "example.com/fake_nic")
	require.NoError(t, err)
	require.Len(t, byName, 1)
	assert.Equal(t, dev.PCIAddress, byName[0].DeviceID, "Multus's way finds the same device")

	require.NoError(t, c.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 3*time.Minute, 200*time.Millisecond, "pod never deleted")
	require.Eventually(t, func() bool { return len(d.Prepared()) == 0 }, time.Minute, 200*time.Millisecond,
		"the kubelet unprepares the claim")

	require.NoError(t, d.Stop(ctx))
	stopped = true
	sl, err = c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, s := range sl.Items {
		assert.NotEqual(t, d.Name(), s.Spec.Driver, "the driver's slice is gone")
	}
	_, err = netlink.LinkByName(dev.Interface)
	assert.Error(t, err, "the device's interface is gone")
}
