package k8s

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/test/harness"
)

// TestAPIServerOutage: kube-apiserver stopped while the kubelet keeps
// making sandboxes — a static pod appears (from the kubelet's manifest dir)
// and a running pod's sandbox is rebuilt (its pause killed). Both get their
// NAD attached from nri-cni's cache, with no API server at all. When the API
// server is back, the status writes catch up: the running pod's
// network-status names its new address, and the static pod's mirror pod
// (whose UID is not the static pod's) gets its network-status too. Nothing
// leaks.
func TestAPIServerOutage(t *testing.T) {
	f := newFixture(t)
	n := f.newNAD("default", harness.RandomName("nad-outage-"))
	noToken := false
	running := f.pod(harness.RandomName("outage-running-"), "default", map[string]string{npwgAnnotation: n.Name})
	// Its sandbox is rebuilt while the API server is down: no token volume
	// for the kubelet to refresh.
	running.Spec.AutomountServiceAccountToken = &noToken
	running = f.create(running)
	p := f.waitReady("default", running.Name)
	oldID, _ := f.readySandbox(p)
	before := f.networkStatus("default", running.Name, 2)

	c := f.w.c
	c.StopAPIServer()
	down := time.Now()
	up := false
	t.Cleanup(func() {
		if !up {
			assert.NoError(t, c.StartAPIServer(context.Background()))
		}
	})
	t.Logf("kube-apiserver stopped")

	// A static pod, written to the kubelet's manifest dir.
	staticName := harness.RandomName("outage-static-")
	manifest := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": staticName, "namespace": "default",
			"annotations": map[string]string{npwgAnnotation: n.Name}},
		"spec": map[string]any{
			"terminationGracePeriodSeconds": 0,
			"containers":                    []any{map[string]any{"name": "pause", "image": harness.PauseImage, "imagePullPolicy": "Never"}},
		},
	}
	data, err := yaml.Marshal(manifest)
	require.NoError(t, err)
	path := filepath.Join(c.StaticPodDir(), staticName+".yaml")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	mirrorName := staticName + "-" + c.NodeName
	staticIDs := func() (ready []string) {
		list, err := f.cri.ListPods(f.ctx, map[string]string{"io.kubernetes.pod.name": mirrorName})
		if err != nil {
			return nil
		}
		for _, sb := range list {
			f.seen[sb.Id] = true
			if sb.State.String() == "SANDBOX_READY" {
				ready = append(ready, sb.Id)
			}
		}
		return ready
	}
	t.Cleanup(func() {
		_ = os.Remove(path)
		f.waitFor("the static pod's sandboxes gone", waitLong, func() (bool, string) {
			list, err := f.cri.ListPods(f.ctx, map[string]string{"io.kubernetes.pod.name": mirrorName})
			return err == nil && len(list) == 0, "still listed"
		})
	})

	// The running pod's sandbox rebuilt by the kubelet.
	f.killPause(oldID)

	var staticID, newID string
	f.waitFor("the static pod's sandbox and the running pod's new sandbox ready", waitLong, func() (bool, string) {
		s, r := staticIDs(), f.readyIDs(string(running.UID))
		if len(s) == 1 {
			staticID = s[0]
		}
		if len(r) == 1 && r[0] != oldID {
			newID = r[0]
		}
		return staticID != "" && newID != "", "static " + staticID + ", new " + newID
	})
	staticNet1 := f.net1Of(staticID)
	newNet1 := f.net1Of(newID)
	assert.True(t, n.contains(staticNet1), "static pod's net1 %s from the cached NAD", staticNet1)
	assert.True(t, n.contains(newNet1), "new sandbox's net1 %s from the cached NAD", newNet1)
	t.Logf("with the API server down for %s: static pod %s and rebuilt sandbox %s attached", since(down), staticNet1, newNet1)

	require.NoError(t, c.StartAPIServer(f.ctx))
	up = true
	back := time.Now()
	t.Logf("kube-apiserver back after %s", back.Sub(down).Round(time.Millisecond))

	f.waitFor("the running pod's network-status names its new address", waitLong, func() (bool, string) {
		st := f.networkStatusNow("default", running.Name)
		return len(st) == 2 && len(st[1].IPs) == 1 && st[1].IPs[0] == bareIP(newNet1), "status " + toJSON(st)
	})
	t.Logf("running pod's network-status caught up %s after the API server returned (was %s)", since(back), toJSON(before[1].IPs))
	f.waitFor("the static pod's mirror has its network-status", waitLong, func() (bool, string) {
		st := f.networkStatusNow("default", mirrorName)
		return len(st) == 2 && len(st[1].IPs) == 1 && st[1].IPs[0] == bareIP(staticNet1), "status " + toJSON(st)
	})
	mirror, err := f.k.CoreV1().Pods("default").Get(f.ctx, mirrorName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, mirror.Annotations["kubernetes.io/config.mirror"], string(mirror.UID), "the mirror's UID is not the static pod's")
	t.Logf("static pod's mirror got its network-status %s after the API server returned", since(back))

	require.NoError(t, os.Remove(path))
	f.waitFor("the static pod's sandboxes gone", waitLong, func() (bool, string) {
		list, err := f.cri.ListPods(f.ctx, map[string]string{"io.kubernetes.pod.name": mirrorName})
		return err == nil && len(list) == 0, "still listed"
	})
	f.deletePod("default", running.Name)
	f.waitReleased(f.seenIDs()...)
	assert.Empty(t, n.ipFiles(f.seenIDs()...), "every address released")
	assert.Equal(t, 1, countLog(f.nriCNILog(), "network detached", oldID), "the old sandbox torn down once")
}

// net1Of is net1's address (CIDR) in the sandbox's netns, waited for: a
// sandbox is ready when RunPodSandbox answered, and deploy/base attaches in
// the background (before the pod's first container).
func (f *fixture) net1Of(id string) string {
	f.t.Helper()
	st, err := f.cri.PodStatus(f.ctx, id)
	require.NoError(f.t, err)
	var addr string
	f.waitFor("net1 with its address in sandbox "+id, waitLong, func() (bool, string) {
		var ok bool
		addr, ok = f.net1(st.NetnsPath)
		return ok && addr != "", "not yet"
	})
	return addr
}
