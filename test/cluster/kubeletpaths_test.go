package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube/podresources"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/fakes/deviceplugin"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// TestKubeletPaths: the paths, and Check naming what is missing (no cluster).
func TestKubeletPaths(t *testing.T) {
	root, err := os.MkdirTemp("", "kp")
	require.NoError(t, err)
	defer os.RemoveAll(root)
	p := (&cluster.Cluster{KubeletRootDir: root}).KubeletPaths()
	assert.Equal(t, "/var/lib/kubelet/device-plugins", p.DevicePluginDir)
	assert.Equal(t, "/var/lib/kubelet/device-plugins/kubelet.sock", p.DevicePluginSocket)
	assert.Equal(t, root+"/pod-resources/kubelet.sock", p.PodResourcesSocket)
	assert.Equal(t, root+"/plugins_registry", p.PluginsRegistryDir)

	p.DevicePluginSocket = filepath.Join(root, "dp.sock")
	require.NoError(t, os.WriteFile(p.DevicePluginSocket, nil, 0o600))
	err = p.Check()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dp.sock is not a socket")
	assert.Contains(t, err.Error(), "pod-resources/kubelet.sock")
	require.NoError(t, os.MkdirAll(filepath.Dir(p.PodResourcesSocket), 0o755))
	for _, s := range []string{p.DevicePluginSocket, p.PodResourcesSocket} {
		_ = os.Remove(s)
		l, err := net.Listen("unix", s)
		require.NoError(t, err)
		defer l.Close()
	}
	assert.NoError(t, p.Check())
}

// TestClusterDevicePluginPodResources (Kubernetes tier): the fake device
// plugin registers with the real kubelet, a pod's two containers request 1
// and 2 of its devices, and the PodResources client returns exactly the
// three devices the kubelet allocated (Allocate calls), sorted, with one Get.
// The device-plugin directory is the host's (every cluster's): a cluster that
// starts meanwhile in another test package takes it over.
//
// The pod names its node (spec.nodeName): what is checked is the kubelet's
// allocation and its PodResources answer, not the scheduler. Scheduled, the
// pod once stayed off Running for 2 minutes in CI with not a line about it in
// the kubelet's log; it was created the moment the API showed the node's 4
// devices, which the scheduler's cache may not have seen yet. On failure the
// test prints the pod's conditions and events.
func TestClusterDevicePluginPodResources(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tools, err := cluster.EnsureTools(ctx)
	require.NoError(t, err)
	c, err := cluster.Start(ctx, cluster.Opts{Tools: tools, Logf: t.Logf})
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			t.Logf("%s\nkubelet log tail:\n%s\n%s log tail:\n%s", c.DescribePod(context.Background(), "default", "devices"),
				tail(c.KubeletLog(), 40), c.Runtime().Name(), c.Runtime().LogTail(30))
		}
		assert.NoError(t, c.Close(context.Background()))
	}()
	paths := c.KubeletPaths()
	require.NoError(t, paths.Check())

	const res = "vendor.example/res"
	devinfo, err := os.MkdirTemp("", "devinfo")
	require.NoError(t, err)
	defer os.RemoveAll(devinfo)
	dp, err := deviceplugin.Start(ctx, deviceplugin.Config{ResourceName: res, Count: 4, Dir: paths.DevicePluginDir, DevInfoDir: devinfo})
	require.NoError(t, err)
	defer func() { assert.NoError(t, dp.Stop()) }()
	t.Logf("device plugin %s on %s: devices %v", res, dp.Socket(), dp.DeviceIDs())

	require.Eventually(t, func() bool {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		q := n.Status.Allocatable[corev1.ResourceName(res)]
		return err == nil && q.Value() == 4
	}, 90*time.Second, 200*time.Millisecond, "the node never advertised 4 %s", res)

	limits := func(n int64) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "devices", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "one", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever, Resources: limits(1)},
				{Name: "two", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever, Resources: limits(2)},
			},
			TerminationGracePeriodSeconds: new(int64),
			NodeName:                      c.NodeName,
		},
	}
	pod, err = c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}, 2*time.Minute, 200*time.Millisecond, "pod never Running")

	var allocated []string
	for _, a := range dp.Allocations() {
		for _, ids := range a.Containers {
			allocated = append(allocated, ids...)
		}
	}
	slices.Sort(allocated)
	require.Len(t, allocated, 3, "Allocate calls: %v", dp.Allocations())

	cl, err := podresources.New(podresources.Options{Socket: paths.PodResourcesSocket})
	require.NoError(t, err)
	defer cl.Close()
	who := podresources.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	t0 := time.Now()
	ids, err := cl.DeviceIDs(ctx, who, res)
	require.NoError(t, err)
	t.Logf("DeviceIDs = %v in %s (allocated %v); stats %+v", ids, time.Since(t0).Round(time.Microsecond), allocated, cl.Stats())
	assert.Equal(t, allocated, ids)
	full, err := cl.PodResources(ctx, who)
	require.NoError(t, err)
	var names []string
	for _, ct := range full.Containers {
		n := 0
		for _, d := range ct.Devices {
			n += len(d.DeviceIDs)
		}
		names = append(names, fmt.Sprintf("%s:%d", ct.Name, n))
	}
	assert.Equal(t, []string{"one:1", "two:2"}, names, "per container, in spec order")
	_, err = cl.DeviceIDs(ctx, who, "other.example/none")
	assert.ErrorIs(t, err, podresources.ErrNoDevices)
	_, err = cl.DeviceIDs(ctx, podresources.Pod{Namespace: "default", Name: "absent", UID: "x"}, res)
	assert.ErrorIs(t, err, podresources.ErrPodNotFound)
	s := cl.Stats()
	// One Get for the pod (PodResources is then a cache hit), one more for
	// the resource it lacks (absence is taken only from a fresh answer), one
	// for the absent pod.
	assert.Equal(t, 3, s.Gets)
	assert.Equal(t, 1, s.CacheHits)
	assert.Zero(t, s.Lists, "the 1.37 kubelet serves Get")

	for _, id := range ids {
		data, err := os.ReadFile(dp.DevInfoPath(id))
		require.NoError(t, err)
		assert.True(t, strings.Contains(string(data), `"version":"1.1.0"`), "%s", data)
	}
}
