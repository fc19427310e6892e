package k8s

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// TestPauseKilled: the sandbox's pause process SIGKILLed (its pid from
// `crictl inspectp`): the kubelet stops the dead sandbox and builds a new
// one → exactly one DEL for the old sandbox and one ADD for the new, the old
// address released, the pod Ready again with net1.
func TestPauseKilled(t *testing.T) {
	f := newFixture(t)
	name := harness.RandomName("pausekill-")
	f.create(f.pod(name, "default", map[string]string{k8sdeploy.Annotation: f.w.o.NetName}))
	pod := f.waitReady("default", name)
	oldID, _ := f.readySandbox(pod)

	f.killPause(oldID)

	var newID string
	f.waitFor("a new ready sandbox", waitLong, func() (bool, string) {
		p, err := f.k.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := f.readyIDs(string(pod.UID))
		if !k8sdeploy.PodReady(p) || len(ready) != 1 {
			return false, "ready sandboxes " + strings.Join(ready, ",")
		}
		newID = ready[0]
		return newID != oldID, "ready sandbox " + newID
	})
	// The pod's Ready condition may still be the old sandbox's, and the
	// new sandbox is ready as soon as RunPodSandbox answered: deploy/base
	// attaches in the background, before the pod's first container, so the
	// attach may still be under way here. Wait for what it leaves.
	f.waitFor("the new sandbox's record, address and cache entry", waitLong, func() (bool, string) {
		files := f.nodeFiles(newID)
		return len(files) == 3, fmt.Sprintf("%v", files)
	})
	_, st := f.readySandbox(pod)
	_, ok := f.net1(st.NetnsPath)
	assert.True(t, ok, "net1 in the new sandbox")
	f.waitReleased(oldID)

	log := f.nriCNILog()
	assert.Equal(t, 1, countLog(log, "network attached", oldID), "one ADD for the old sandbox")
	assert.Equal(t, 1, countLog(log, "network detached", oldID), "one DEL for the old sandbox")
	assert.Equal(t, 1, countLog(log, "network attached", newID), "one ADD for the new sandbox")
	assert.Equal(t, 0, countLog(log, "network detached", newID), "no DEL for the new sandbox yet")
	assert.Equal(t, f.ports+1, countBridgePorts(t, f), "one veth on the bridge")
}

// killPause SIGKILLs the sandbox's pause process (its pid from `crictl
// inspectp`, checked to be a pause).
func (f *fixture) killPause(id string) {
	t := f.t
	t.Helper()
	out, err := f.w.c.Crictl(f.ctx, "inspectp", "-o", "json", id)
	require.NoError(t, err)
	var inspect struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &inspect), "crictl inspectp: %.300s", out)
	require.Positive(t, inspect.Info.Pid)
	comm, err := readComm(inspect.Info.Pid)
	require.NoError(t, err)
	require.Equal(t, "pause", comm, "pid %d is the sandbox's pause", inspect.Info.Pid)
	require.NoError(t, syscall.Kill(inspect.Info.Pid, syscall.SIGKILL))
}

// TestContainerdAndDaemonSetRestart: containerd restarted under attached
// pods (nri-cni reconnects; the pods keep their sandboxes and addresses),
// then nri-cni's pod replaced (`kubectl rollout restart`), then the pods
// deleted: every address is released — containerd sends no Stop for pods it
// had before its restart, so this is nri-cni's netns watcher, run by a
// process that did not exist when the pods were attached.
func TestContainerdAndDaemonSetRestart(t *testing.T) {
	f := newFixture(t)
	type attached struct{ name, id, ip string }
	var pods []attached
	for i := 0; i < 2; i++ {
		name := harness.RandomName("ctdrestart-")
		f.create(f.pod(name, "default", map[string]string{k8sdeploy.Annotation: f.w.o.NetName}))
		pods = append(pods, attached{name: name})
	}
	for i := range pods {
		p := f.waitReady("default", pods[i].name)
		var st *harness.PodStatus
		pods[i].id, st = f.readySandbox(p)
		pods[i].ip, _ = f.net1(st.NetnsPath)
		require.NotEmpty(t, pods[i].ip)
	}
	synced := f.w.d.Registrations()
	start := time.Now()
	require.NoError(t, f.w.c.RestartContainerd(f.ctx))
	_, err := f.w.d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err, "nri-cni reconnects to the restarted containerd")
	t.Logf("containerd restarted, nri-cni reconnected in %s", time.Since(start).Round(time.Millisecond))
	for _, a := range pods {
		p := f.waitReady("default", a.name)
		id, st := f.readySandbox(p)
		ip, _ := f.net1(st.NetnsPath)
		assert.Equal(t, a.id, id, "same sandbox after the containerd restart")
		assert.Equal(t, a.ip, ip, "same net1 address after the containerd restart")
	}

	before, err := f.w.d.Pods(f.ctx)
	require.NoError(t, err)
	require.Len(t, before, 1)
	assert.NotEqual(t, before[0].Name, f.restartNRICNI(), "a new nri-cni pod")
	for _, a := range pods {
		assert.Len(t, f.nodeFiles(a.id), 3, "%s still attached after nri-cni's restart", a.name)
	}

	for _, a := range pods {
		_, err := f.w.c.Kubectl(f.ctx, "delete", "pod", a.name, "--wait=true", "--timeout=3m")
		require.NoError(t, err)
	}
	released := time.Now()
	f.waitReleased(pods[0].id, pods[1].id)
	t.Logf("addresses released %s after the pods were gone", time.Since(released).Round(time.Millisecond))
	log := f.nriCNILog()
	for _, a := range pods {
		assert.Equal(t, 0, countLog(log, "network attached", a.id), "the new nri-cni did not ADD %s again", a.name)
		assert.Equal(t, 1, countLog(log, "network detached", a.id), "one DEL for %s", a.name)
		t.Logf("%s: released by the netns watcher (containerd sent no Stop after its restart): %t", a.name,
			countLog(log, "netns gone: networks released", a.id) == 1)
	}
}

// TestKubeletRestart: the kubelet stopped and started again under an
// attached pod: nothing happens to it — same sandbox, same net1 address, no
// ADD or DEL logged by nri-cni.
func TestKubeletRestart(t *testing.T) {
	f := newFixture(t)
	name := harness.RandomName("kubelet-")
	f.create(f.pod(name, "default", map[string]string{k8sdeploy.Annotation: f.w.o.NetName}))
	pod := f.waitReady("default", name)
	id, st := f.readySandbox(pod)
	ip, _ := f.net1(st.NetnsPath)
	require.NotEmpty(t, ip)
	log := f.nriCNILog()
	adds, dels := strings.Count(log, `msg="network attached"`), strings.Count(log, `msg="network detached"`)

	f.w.c.StopKubelet()
	require.NoError(t, f.w.c.StartKubelet(f.ctx))
	// The restarted kubelet relists the runtime and syncs every pod within
	// its first sync periods; watch for a while, then compare.
	p := f.waitReady("default", name)
	time.Sleep(15 * time.Second)
	id2, st2 := f.readySandbox(p)
	ip2, _ := f.net1(st2.NetnsPath)
	assert.Equal(t, id, id2, "same sandbox")
	assert.Equal(t, ip, ip2, "same net1 address")
	log = f.nriCNILog()
	assert.Equal(t, adds, strings.Count(log, `msg="network attached"`), "no ADD")
	assert.Equal(t, dels, strings.Count(log, `msg="network detached"`), "no DEL")
	assert.Len(t, f.nodeFiles(id), 3)
}

// TestSyncAttachOptIn: pods that were running before nri-cni was installed
// (its DaemonSet moved off the node with a nodeSelector, then put back) are
// attached by the resync only if they ask: the annotated pod gets net1, the
// plain one nothing (requireAnnotation in the shipped ConfigMap). The
// annotated pod opts its container out of waiting for nri-cni (a
// container-scoped required-plugins key wins over the one the admission
// policy adds), as a pod from before the policy: it runs without net1, and
// the resync says so (a StartedWithoutNetworks Warning Event).
func TestSyncAttachOptIn(t *testing.T) {
	f := newFixture(t)
	w := f.w
	away := `{"spec":{"template":{"spec":{"nodeSelector":{"k8s-test.nri-cni.io/away":"true"}}}}}`
	back := `{"spec":{"template":{"spec":{"nodeSelector":null}}}}`
	// Registered after the fixture's: runs first, so nri-cni is back
	// before the pods are deleted.
	t.Cleanup(func() {
		synced := w.d.Registrations()
		_, err := w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", back)
		assert.NoError(t, err)
		if pods, _ := w.d.Pods(f.ctx); len(pods) == 1 && k8sdeploy.PodReady(&pods[0]) {
			synced = 0 // back already: WaitReady only records its pod
		} else {
			synced++
		}
		_, err = w.d.WaitReady(f.ctx, synced, waitLong)
		assert.NoError(t, err)
	})
	_, err := w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", away)
	require.NoError(t, err)
	require.NoError(t, w.d.WaitGone(f.ctx, waitLong))

	annotated, plain := harness.RandomName("before-ann-"), harness.RandomName("before-plain-")
	f.create(f.pod(annotated, "default", map[string]string{k8sdeploy.Annotation: w.o.NetName,
		"required-plugins.noderesource.dev/container.pause": "[]"}))
	f.create(f.pod(plain, "default", nil))
	annPod, plainPod := f.waitReady("default", annotated), f.waitReady("default", plain)
	annID, annSt := f.readySandbox(annPod)
	plainID, plainSt := f.readySandbox(plainPod)
	_, ok := f.net1(annSt.NetnsPath)
	require.False(t, ok, "no nri-cni yet: no net1")

	synced := w.d.Registrations()
	_, err = w.c.Kubectl(f.ctx, "-n", "kube-system", "patch", "ds/nri-cni", "--type=merge", "-p", back)
	require.NoError(t, err)
	_, err = w.d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err)
	f.waitFor("nri-cni's resync done", waitLong, func() (bool, string) {
		return strings.Contains(f.nriCNILog(), `msg="resync with the runtime done"`), "not yet"
	})
	_, ok = f.net1(annSt.NetnsPath)
	assert.True(t, ok, "the annotated pod that ran before nri-cni got net1 from the resync")
	f.waitEvent("default", annotated, "StartedWithoutNetworks", "containers pause started before the pod's networks were attached")
	assert.Len(t, f.nodeFiles(annID), 3)
	_, ok = f.net1(plainSt.NetnsPath)
	assert.False(t, ok, "the plain pod that ran before nri-cni got nothing")
	assert.Empty(t, f.nodeFiles(plainID))
}

func readComm(pid int) (string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(data)), err
}
