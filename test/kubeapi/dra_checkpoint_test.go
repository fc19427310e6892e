package kubeapi

// Issue 41, item 7, on a real cluster: the kubelet's DRA checkpoint made
// unreadable (rewritten as another version) under nri-cni-k8s itself,
// running as the node's NRI plugin and DRA driver.

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/deploy"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
	"github.com/nri-cni/nri-cni/test/k8sdra"
)

// otherVersion is the kubelet's checkpoint file data as a kubelet of
// another checkpoint version would write it: apiVersion v2, its checksum
// right.
func otherVersion(t *testing.T, file []byte) []byte {
	t.Helper()
	var cp struct {
		Data     string `json:"Data"`
		Checksum uint32 `json:"Checksum"`
	}
	require.NoError(t, json.Unmarshal(file, &cp))
	const v1 = `"apiVersion":"checkpoint.dra.kubelet.k8s.io/v1"`
	require.Contains(t, cp.Data, v1)
	cp.Data = strings.Replace(cp.Data, v1, `"apiVersion":"checkpoint.dra.kubelet.k8s.io/v2"`, 1)
	cp.Checksum = crc32.ChecksumIEEE([]byte(cp.Data))
	out, err := json.Marshal(cp)
	require.NoError(t, err)
	return out
}

// checkUnreadableCheckpoint: nri-cni-k8s (built here) serves the node's
// containerd over NRI and is its DRA driver nri-cni.io. A pod's claim is
// prepared and attached (data0). nri-cni stops, the claim's record is
// lost, the kubelet's checkpoint is rewritten as version v2, and nri-cni
// starts with a rule that refuses the claim's class (so it cannot rebuild
// the record). Then: a Warning Event DRACheckpointUnreadable on the Node,
// `nri-cni status` naming the file, the reason and the claim held back; the
// pod's sandbox stopped, its next sandbox does not start — nri-cni refuses
// it naming the claim. nri-cni restarted without the rule rebuilds the
// record from the claim and the pod runs again with data0. The checkpoint
// is restored afterwards (the kubelet also rewrites it itself before each
// sandbox it creates).
func checkUnreadableCheckpoint(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	require.NotNil(t, c.Containerd, "the cluster's runtime is containerd")
	tools, err := harness.EnsureContainerdTools()
	require.NoError(t, err)
	dir := t.TempDir()
	bin, err := harness.GoBuild(dir, "./cmd/nri-cni-k8s", "nri-cni-k8s")
	require.NoError(t, err)
	b, err := deploy.LoadBase(deploy.RepoRoot())
	require.NoError(t, err)
	_, err = c.Kubectl(ctx, "apply", "-f", filepath.Join(b.Dir, "deviceclass.yaml"))
	require.NoError(t, err)

	// nri-cni's config: one network (its own bridge and subnet) published
	// as a DRA device, its state under dir.
	network, bridge := harness.RandomName("ckpt-"), harness.RandomName("ncck")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	confDir, stateDir, logFile := filepath.Join(dir, "net.d"), filepath.Join(dir, "state"), filepath.Join(dir, "nri-cni.log")
	require.NoError(t, os.MkdirAll(confDir, 0o755))
	conflist, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": network, "plugins": []any{map[string]any{
		"type": "bridge", "bridge": bridge, "ipam": map[string]any{"type": "host-local",
			"ranges": [][]map[string]string{{{"subnet": harness.RandomSubnet(200)}}}, "dataDir": filepath.Join(dir, "ipam")}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(confDir, "10-"+network+".conflist"), conflist, 0o644))
	cfgPath := filepath.Join(dir, "nri.conf")
	ns := harness.RandomName("ckpt-") // nri-cni serves this namespace only
	var running *harness.Plugin
	t.Cleanup(func() {
		if running != nil {
			running.Kill()
		}
	})
	start := func(refuseClass bool) {
		t.Helper()
		draConf := map[string]any{"enabled": true, "kubeletDir": c.KubeletRootDir, "sharing": "slots", "slots": 2, "nads": false}
		if refuseClass {
			draConf["deviceClasses"] = map[string]any{"default": []string{"team-net"}}
		}
		data, err := json.Marshal(map[string]any{"confDir": confDir, "binDirs": []string{tools.CNIDir},
			"cacheDir": filepath.Join(dir, "cni-cache"), "stateDir": stateDir, "logLevel": "debug", "logFile": logFile,
			"namespaces": map[string]any{"include": []string{ns}},
			"kubernetes": map[string]any{"kubeconfig": c.Kubeconfig, "nodeName": c.NodeName, "dra": draConf}})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(cfgPath, data, 0o644))
		running, err = harness.StartPlugin(ctx, c.Containerd, bin, cfgPath, harness.PluginConfig{LogFile: logFile})
		require.NoError(t, err)
	}
	stop := func() {
		t.Helper()
		require.NoError(t, running.Stop())
		running = nil
	}
	cri, err := harness.DialCRI(ctx, c.Containerd.Address)
	require.NoError(t, err)
	defer cri.Close()
	ready := func(uid string) []string {
		list, err := cri.ListPods(ctx, map[string]string{"io.kubernetes.pod.uid": uid})
		require.NoError(t, err)
		var ids []string
		for _, sb := range list {
			if sb.State.String() == "SANDBOX_READY" {
				ids = append(ids, sb.Id)
			}
		}
		return ids
	}
	waitRunning := func(ns, name string) *corev1.Pod {
		t.Helper()
		var pod *corev1.Pod
		require.Eventually(t, func() bool {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			pod = p
			return err == nil && k8sdeploy.PodReady(p) && len(ready(string(p.UID))) == 1
		}, 3*time.Minute, 500*time.Millisecond, "pod %s/%s never ran with one ready sandbox; nri-cni's log:\n%s", ns, name,
			tail(logFile))
		return pod
	}
	hasData0 := func(pod *corev1.Pod) bool {
		t.Helper()
		ids := ready(string(pod.UID))
		require.Len(t, ids, 1)
		st, err := cri.PodStatus(ctx, ids[0])
		require.NoError(t, err)
		_, ok, err := harness.PodIface(st.NetnsPath, "data0")
		require.NoError(t, err)
		return ok
	}
	event := func(ns, selector string, parts ...string) string {
		t.Helper()
		var msg string
		require.Eventually(t, func() bool {
			l, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
			if err != nil {
				return false
			}
			for _, e := range l.Items {
				if containsAll(e.Message, parts...) {
					msg = e.Type + " " + e.Reason + ": " + e.Message
					return true
				}
			}
			return false
		}, waitFor, 500*time.Millisecond, "no Event (%s) saying %q in namespace %q; nri-cni's log:\n%s", selector, parts, ns, tail(logFile))
		return msg
	}

	// A pod whose claim nri-cni prepares and attaches.
	start(false)
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx,
		k8sdra.ClaimTemplate(ns, "net", nil, k8sdra.NetRequest{Name: "net", Network: network, Config: `"interface":"data0"`}),
		metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, templatePod(ns, "app", "net"), metav1.CreateOptions{})
	require.NoError(t, err)
	pod := waitRunning(ns, "app")
	require.True(t, hasData0(pod), "the claim's network attached")
	records := k8sdra.ClaimRecords(stateDir)
	require.Len(t, records, 1)
	claimUID := strings.TrimSuffix(filepath.Base(records[0]), ".json")
	claim := ""
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			claim = *s.ResourceClaimName
		}
	}
	require.NotEmpty(t, claim)

	// nri-cni away: the record lost, the kubelet's checkpoint of another
	// version; back with a rule that refuses the claim's class.
	stop()
	require.NoError(t, os.Remove(records[0]))
	kubeletFile := filepath.Join(c.KubeletRootDir, dra.CheckpointFile)
	original, err := os.ReadFile(kubeletFile)
	require.NoError(t, err)
	v2 := otherVersion(t, original)
	require.NoError(t, os.WriteFile(kubeletFile, v2, 0o600))
	t.Cleanup(func() {
		if now, err := os.ReadFile(kubeletFile); err == nil && bytes.Equal(now, v2) {
			_ = os.WriteFile(kubeletFile, original, 0o600) // the kubelet has not written it since
		}
	})
	start(true)
	checkpoint := dra.CheckpointPath(c.KubeletRootDir)

	msg := event("default", "involvedObject.kind=Node,involvedObject.name="+c.NodeName+",reason="+kube.ReasonDRACheckpointUnreadable,
		checkpoint, "(version)", "checkpoint.dra.kubelet.k8s.io/v2")
	t.Logf("the Node's Event: %s", msg)
	msg = event(ns, "involvedObject.kind=ResourceClaim,reason="+kube.ReasonClaimRecordMissing, claim,
		`DeviceClass "nri-cni.io" is not one namespace `+ns+" may use")
	t.Logf("the claim's Event: %s", msg)
	out, err := exec.CommandContext(ctx, bin, "status", "--config", cfgPath).Output()
	require.NoError(t, err)
	status := string(out)
	t.Logf("nri-cni status:\n%s", status)
	assert.Contains(t, status, "CANNOT READ the kubelet's "+checkpoint+" (version): ")
	assert.Contains(t, status, "held back: "+ns+"/"+claim+" (uid "+claimUID+", pods "+string(pod.UID)+"): ")

	// The pod's sandbox goes; the kubelet makes another, which nri-cni
	// refuses: the pod does not run without its claim's network.
	ids := ready(string(pod.UID))
	require.Len(t, ids, 1)
	require.NoError(t, cri.StopPod(ctx, ids[0]))
	msg = event(ns, "involvedObject.kind=Pod,involvedObject.name=app,reason=FailedCreatePodSandBox",
		"no record of the prepared claim", "ResourceClaim "+ns+"/"+claim)
	t.Logf("the pod's next sandbox: %s", msg)
	assert.Empty(t, ready(string(pod.UID)), "no sandbox of the pod runs without the claim's network")

	// nri-cni back without the rule: it rebuilds the record from the
	// claim, and the kubelet's next try runs the pod with data0.
	stop()
	start(false)
	pod = waitRunning(ns, "app")
	assert.True(t, hasData0(pod), "the claim's network attached again")
	assert.True(t, k8sdra.ClaimRecorded(stateDir, claimUID), "the record rebuilt")
	if now, err := os.ReadFile(kubeletFile); err == nil && bytes.Equal(now, v2) {
		require.NoError(t, os.WriteFile(kubeletFile, original, 0o600))
	}

	// The pod goes: the kubelet unprepares the claim through nri-cni.
	require.NoError(t, c.Client.CoreV1().Pods(ns).Delete(ctx, "app", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return !k8sdra.ClaimRecorded(stateDir, claimUID) }, 2*time.Minute, 200*time.Millisecond,
		"the kubelet never unprepared the claim")
	stop()
	require.NoError(t, c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
}

// templatePod is a pause pod ns/name whose one claim "net" is made from the
// template tmpl.
func templatePod(ns, name, tmpl string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "net"}}}}},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &tmpl}},
			TerminationGracePeriodSeconds: new(int64),
		}}
}

// containsAll reports whether s contains every part.
func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// tail is the end of the file at path (a log), for failure messages.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}
