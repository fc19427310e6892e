package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/testenv"
)

// hostView is what the test compares before Start and after Close.
type hostView struct {
	links   map[string]bool
	mounts  map[string]bool
	sysctls map[string]string
	paths   map[string]bool // the kubelet's default paths: exist?
	chains  []string
	// blackholed: traffic to the Service range dropped (a blackhole route).
	blackholed bool
	ourLinks   []string // filled in while the cluster runs
	// clusters running on the host when the view was taken (other test
	// packages run in parallel): while any runs, the shared state is theirs.
	clusters int
}

// kubeletDefaultPaths are where a kubelet writes by default; the cluster
// points it elsewhere or cleans up.
var kubeletDefaultPaths = []string{
	"/var/log/containers", "/var/log/pods", "/var/lib/kubelet", "/var/run/kubernetes", "/etc/kubernetes",
	"/run/nri-cni-k8s", // the cluster registry
}

func viewHost(t *testing.T) hostView {
	t.Helper()
	v := hostView{links: map[string]bool{}, mounts: map[string]bool{}, sysctls: cluster.ReadSysctls(),
		chains: cluster.KubeChains(), clusters: cluster.ClustersRunning(), blackholed: cluster.ServiceRangeBlackholed()}
	links, err := netlink.LinkList()
	require.NoError(t, err)
	for _, l := range links {
		v.links[l.Attrs().Name] = true
	}
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			v.mounts[fields[4]] = true
		}
	}
	v.paths = map[string]bool{}
	for _, p := range kubeletDefaultPaths {
		_, err := os.Stat(p)
		v.paths[p] = err == nil
	}
	return v
}

// TestClusterPlainPod: a pod through the API on the default node
// (containerd), and Close leaves the host as it was.
func TestClusterPlainPod(t *testing.T) { plainPod(t, cluster.RuntimeContainerd) }

// TestClusterCRIOPlainPod: the same on a node running CRI-O; Close also
// leaves none of CRI-O's processes, mounts, pinned namespaces, cache
// entries or pod cgroups (Close checks CRI-O's leftovers and fails on any).
func TestClusterCRIOPlainPod(t *testing.T) { plainPod(t, cluster.RuntimeCRIO) }

func plainPod(t *testing.T, runtime string) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	tools, err := cluster.EnsureTools(ctx)
	require.NoError(t, err)
	before := healedHost(t)

	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Opts{Tools: tools, Audit: true, Logf: t.Logf, Runtime: runtime})
	require.NoError(t, err)
	require.Equal(t, runtime, c.Runtime().Name())
	t.Logf("Start → node %s Ready (and default service account) in %s", c.NodeName, time.Since(start).Round(time.Millisecond))
	closed := false
	t.Cleanup(func() {
		if !closed {
			if t.Failed() {
				t.Logf("kubelet log tail:\n%s\n%s log tail:\n%s", tail(c.KubeletLog(), 40), runtime, c.Runtime().LogTail(40))
			}
			assert.NoError(t, c.Close(context.Background()))
		}
	})
	pids := c.Pids()
	dir, cgroupRoot, bridge := c.Dir, c.CgroupRoot(), c.PrimaryBridge()
	before.ourLinks = []string{c.Link, bridge}

	const name = "plain"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	created := time.Now()
	_, err = c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}, 40*time.Second, 100*time.Millisecond, "pod never Running")
	t.Logf("pod create → Running in %s", time.Since(created).Round(time.Millisecond))

	// The pod's veth on the primary bridge must be gone after Close too.
	br, err := netlink.LinkByName(bridge)
	require.NoError(t, err)
	links, err := netlink.LinkList()
	require.NoError(t, err)
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			before.ourLinks = append(before.ourLinks, l.Attrs().Name)
		}
	}
	assert.Greater(t, len(before.ourLinks), 2, "the pod's veth is on the primary bridge")

	out, err := c.Kubectl(ctx, "get", "pods", "-o", "wide")
	require.NoError(t, err)
	t.Logf("kubectl get pods -o wide:\n%s", out)
	out, err = c.Crictl(ctx, "pods")
	require.NoError(t, err)
	t.Logf("crictl pods:\n%s", out)
	for k, kib := range c.RSS() {
		t.Logf("RSS %-24s %6d KiB", k, kib)
	}
	changed := cluster.ReadSysctls()
	for k, v := range before.sysctls {
		if changed[k] != v {
			t.Logf("kubelet changed %s: %s → %s", k, v, changed[k])
		}
	}
	t.Logf("KUBE-* chains while running: %v", cluster.KubeChains())
	assert.True(t, cluster.ServiceRangeBlackholed(), "the Service range %s is a blackhole while a cluster runs", cluster.ServiceCIDR)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	require.NoError(t, err)
	sv, err := c.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	t.Logf("Kubernetes %s: API server %s, kubelet %s", tools.Version, sv.GitVersion, node.Status.NodeInfo.KubeletVersion)
	assert.Equal(t, tools.Version, sv.GitVersion)
	assert.Equal(t, tools.Version, node.Status.NodeInfo.KubeletVersion)

	require.NoError(t, c.Client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 3*time.Minute, 100*time.Millisecond, "pod never deleted")

	creates, err := c.AuditEvents(func(e cluster.AuditEvent) bool {
		return e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "pods" &&
			e.ObjectRef.Subresource == "" && e.ObjectRef.Name == name
	})
	require.NoError(t, err)
	assert.Len(t, creates, 1, "one pod create in the audit log")

	// A pod still running at Close: the runtime's Close removes it (the
	// kubelet is stopped first), and its cgroups go with the cgroup root.
	left := pod.DeepCopy()
	left.Name = "left"
	_, err = c.Client.CoreV1().Pods("default").Create(ctx, left, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, left.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}, 3*time.Minute, 100*time.Millisecond, "pod left never Running")
	pids["pod left's container"] = containerPid(ctx, t, c, left.Name)

	require.NoError(t, c.Close(ctx))
	closed = true
	after := viewHost(t)
	assertRestored(t, before, after, dir)
	for comp, pid := range pids {
		_, err := os.Stat(filepath.Join("/proc", itoa(pid)))
		assert.True(t, os.IsNotExist(err), "%s (pid %d) still running", comp, pid)
	}
	cg, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", cgroupRoot))
	assert.Empty(t, cg, "cgroups left behind")
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "cluster dir removed")
}

// TestClusterSharedHostState: host state every kubelet changes (tunables,
// /var/log/containers, the device-plugin dir) stays while any cluster runs and
// is restored by the last to close; a failed Start cleans up after itself.
func TestClusterSharedHostState(t *testing.T) {
	testenv.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	tools, err := cluster.EnsureTools(ctx)
	require.NoError(t, err)
	before := healedHost(t)

	a, err := cluster.Start(ctx, cluster.Opts{Tools: tools})
	require.NoError(t, err)
	aClosed := false
	t.Cleanup(func() {
		if !aClosed {
			assert.NoError(t, a.Close(context.Background()))
		}
	})
	running := viewHost(t)
	before.ourLinks = []string{a.Link, a.Containerd.PrimaryBridge}

	// A kubelet that cannot start: Start fails, and undoes its own part only.
	failDir := t.TempDir()
	bad, err := cluster.Start(ctx, cluster.Opts{Tools: tools, Dir: failDir, EditKubeletConfig: func(cfg map[string]any) {
		cfg["port"] = 70000 // refused by the kubelet's config validation
	}})
	if err == nil {
		assert.NoError(t, bad.Close(ctx))
	}
	require.Error(t, err)
	t.Logf("failed Start as expected: %.300s", err)
	assert.Empty(t, processesMentioning(failDir), "processes of the failed cluster")
	assertNoMountsUnder(t, viewHost(t), failDir)
	assert.Equal(t, running.sysctls, viewHost(t).sysctls, "tunables kept while cluster a runs")
	assert.Equal(t, running.paths, viewHost(t).paths, "shared paths kept while cluster a runs")

	b, err := cluster.Start(ctx, cluster.Opts{Tools: tools})
	require.NoError(t, err)
	before.ourLinks = append(before.ourLinks, b.Link, b.Containerd.PrimaryBridge)
	require.NoError(t, a.Close(ctx))
	aClosed = true
	assert.Equal(t, running.sysctls, viewHost(t).sysctls, "tunables kept while cluster b runs")
	assert.Equal(t, running.paths, viewHost(t).paths, "shared paths kept while cluster b runs")
	require.NoError(t, b.Close(ctx))
	assertRestored(t, before, viewHost(t), b.Dir)
	assertRestored(t, before, viewHost(t), a.Dir)
}

// healedHost is the host as it was before any cluster: what a run killed
// earlier on this machine left (a CI job cancelled in the Kubernetes tier) is
// undone first, or it would be taken for the host's own state (the registry,
// tunables and blackhole such a run leaves are restored by the next Close).
func healedHost(t *testing.T) hostView {
	t.Helper()
	require.NoError(t, cluster.HealHost(), "healing what a killed run left")
	return viewHost(t)
}

// childEnv names the file a cluster started by TestClusterKilledRunIsHealed's
// child process describes itself in.
const childEnv = "NRI_CNI_CLUSTER_CHILD"

type childCluster struct {
	Dir, Link, Bridge string
}

// TestClusterKilledRunIsHealed: a test process killed while its cluster runs
// (go test's -timeout, a cancelled CI job) leaves the cluster's components
// running and the host changed (tunables, the kubelet's default paths, the
// Service range's blackhole); HealHost, which every cluster test calls before
// looking at the host, ends those processes and puts the host back.
func TestClusterKilledRunIsHealed(t *testing.T) {
	testenv.RequireRoot(t)
	if cluster.ClustersRunning() > 0 {
		// The shared host state is held by a live cluster of another test
		// package; healing would only sweep, so the comparison is not possible.
		t.Skip("another cluster runs on this host (test packages in parallel): run with -p 1, as make test does")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, err := cluster.EnsureTools(ctx)
	require.NoError(t, err)
	before := healedHost(t)

	info := filepath.Join(t.TempDir(), "child.json")
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+info)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		assert.NoError(t, cluster.HealHost())
	})
	var child childCluster
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(info)
		return err == nil && json.Unmarshal(data, &child) == nil && child.Dir != ""
	}, 5*time.Minute, 100*time.Millisecond, "the child's cluster never came up:\n%s", out)
	running := viewHost(t)
	require.NotEmpty(t, processesMentioning(child.Dir), "the child's cluster components")
	require.True(t, running.blackholed, "the Service range blackholed while the child's cluster runs")

	require.NoError(t, cmd.Process.Kill()) // the test process only: its components run on
	_ = cmd.Wait()
	require.NotEmpty(t, processesMentioning(child.Dir), "components outlive their killed test process")

	require.NoError(t, cluster.HealHost())
	after := viewHost(t)
	before.ourLinks = []string{child.Link, child.Bridge}
	assertRestored(t, before, after, child.Dir)
	_, err = os.Stat(child.Dir)
	assert.True(t, os.IsNotExist(err), "the killed cluster's dir removed")
}

// TestMain runs TestClusterKilledRunIsHealed's child when asked to.
func TestMain(m *testing.M) {
	if info := os.Getenv(childEnv); info != "" {
		os.Exit(runChild(info))
	}
	os.Exit(m.Run())
}

// runChild is TestClusterKilledRunIsHealed's child process: it starts a
// cluster, describes it in the file info and waits to be killed.
func runChild(info string) int {
	ctx := context.Background()
	tools, err := cluster.EnsureTools(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	c, err := cluster.Start(ctx, cluster.Opts{Tools: tools, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	data, _ := json.Marshal(childCluster{Dir: c.Dir, Link: c.Link, Bridge: c.PrimaryBridge()})
	if err := os.WriteFile(info+".tmp", data, 0o644); err == nil {
		err = os.Rename(info+".tmp", info)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		_ = c.Close(ctx)
		return 1
	}
	select {} // killed by the parent
}

// assertRestored compares the host after Close with before: the cluster's
// links, mounts and processes gone, shared host state as it was.
func assertRestored(t *testing.T, before, after hostView, dir string) {
	t.Helper()
	for _, l := range before.ourLinks {
		assert.False(t, after.links[l], "link %s left behind", l)
	}
	for l := range after.links {
		if !before.links[l] {
			t.Logf("link %s appeared during the test (another test on this machine?)", l)
		}
	}
	for m := range after.mounts {
		if !before.mounts[m] {
			t.Logf("mount %s appeared during the test", m)
		}
	}
	assertNoMountsUnder(t, after, dir)
	assert.Empty(t, processesMentioning(dir), "processes still naming %s", dir)
	if before.clusters > 0 || after.clusters > 0 {
		// Another test package's cluster holds the shared state; the last
		// cluster to close restores it (TestClusterSharedHostState covers that).
		t.Logf("%d/%d other cluster(s) on this host before/after: shared host state not compared", before.clusters, after.clusters)
		return
	}
	assert.Equal(t, before.sysctls, after.sysctls, "kernel tunables restored")
	assert.Equal(t, before.paths, after.paths, "the kubelet's default paths as before")
	assert.Equal(t, before.chains, after.chains, "KUBE-* iptables chains as before")
	assert.Equal(t, before.blackholed, after.blackholed, "the Service range's blackhole route removed")
}

func assertNoMountsUnder(t *testing.T, v hostView, dir string) {
	t.Helper()
	for m := range v.mounts {
		assert.False(t, strings.HasPrefix(m, dir+"/") || m == dir, "mount %s left behind", m)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// containerPid is the pid of the running container of the pod (crictl).
func containerPid(ctx context.Context, t *testing.T, c *cluster.Cluster, pod string) int {
	t.Helper()
	out, err := c.Crictl(ctx, "ps", "-q", "--state", "running", "--label", "io.kubernetes.pod.name="+pod)
	require.NoError(t, err)
	ids := strings.Fields(out)
	require.Len(t, ids, 1, "running containers of pod %s", pod)
	out, err = c.Crictl(ctx, "inspect", ids[0])
	require.NoError(t, err)
	var st struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Positive(t, st.Info.Pid, "pid of container %s", ids[0])
	return st.Info.Pid
}

// tail is the last n lines of a log file.
func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// processesMentioning lists "pid cmdline" of the processes whose command
// line names dir (the cluster's components and shims do).
func processesMentioning(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir+"/") {
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}
