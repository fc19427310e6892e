package k8s

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

const (
	// ownerLabel marks every object a test creates (pods, Deployments and,
	// through the kubelet, their sandboxes) with the test's token; the
	// test's cleanup deletes by it.
	ownerLabel = "k8s-test.nri-cni.io/owner"
	// Generous: a loaded 2-core machine.
	waitLong = 3 * time.Minute
)

// fixture is one test's view of the shared cluster. Its cleanup deletes
// what the test created through the API, waits for the pods to be gone and
// asserts that nri-cni's node-local traces of every sandbox the test saw
// (records, addresses, libcni cache entries) are gone and the bridge has
// the ports it had before.
type fixture struct {
	t     *testing.T
	w     *env
	ctx   context.Context
	k     kubernetes.Interface
	cri   *harness.CRI
	owner string
	seen  map[string]bool // sandbox ids
	ports int             // bridge ports at the start
}

func newFixture(t *testing.T) *fixture {
	w := needWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	cri, err := harness.DialCRI(ctx, w.c.Containerd.Address)
	require.NoError(t, err)
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Name()))
	f := &fixture{t: t, w: w, ctx: ctx, k: w.c.Client, cri: cri, owner: fmt.Sprintf("t%x", h.Sum64()), seen: map[string]bool{}}
	f.ports, err = harness.BridgePorts(w.o.Bridge)
	require.NoError(t, err)
	t.Cleanup(func() { f.cleanup(); cri.Close() })
	return f
}

// pod is a pause pod labelled as f's, in ns, with annotations.
func (f *fixture) pod(name, ns string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{ownerLabel: f.owner},
			Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// create creates pod through the API.
func (f *fixture) create(pod *corev1.Pod) *corev1.Pod {
	f.t.Helper()
	p, err := f.k.CoreV1().Pods(pod.Namespace).Create(f.ctx, pod, metav1.CreateOptions{})
	require.NoError(f.t, err)
	return p
}

// waitFor polls cond until it holds, failing f.t with its last message
// after timeout.
func (f *fixture) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || f.ctx.Err() != nil {
			f.t.Fatalf("%s: not within %s: %s", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitReady waits for the pod to be Running and Ready and returns it.
func (f *fixture) waitReady(ns, name string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.waitFor("pod "+ns+"/"+name+" Ready", waitLong, func() (bool, string) {
		p, err := f.k.CoreV1().Pods(ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return k8sdeploy.PodReady(p), fmt.Sprintf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
	})
	return pod
}

// sandboxes lists the pod's sandboxes (every state) through CRI, by the uid
// label the kubelet puts on them, and notes their ids.
func (f *fixture) sandboxes(uid string) []string {
	f.t.Helper()
	list, err := f.cri.ListPods(f.ctx, map[string]string{"io.kubernetes.pod.uid": uid})
	require.NoError(f.t, err)
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.Id)
		f.seen[sb.Id] = true
	}
	sort.Strings(ids)
	return ids
}

// readyIDs are the pod's ready sandboxes (no assertion: for polling).
func (f *fixture) readyIDs(uid string) []string {
	list, err := f.cri.ListPods(f.ctx, map[string]string{"io.kubernetes.pod.uid": uid})
	if err != nil {
		return nil
	}
	var ids []string
	for _, sb := range list {
		f.seen[sb.Id] = true
		if sb.State.String() == "SANDBOX_READY" {
			ids = append(ids, sb.Id)
		}
	}
	return ids
}

// readySandbox is the pod's one ready sandbox: its id and status (netns).
func (f *fixture) readySandbox(pod *corev1.Pod) (string, *harness.PodStatus) {
	f.t.Helper()
	list, err := f.cri.ListPods(f.ctx, map[string]string{"io.kubernetes.pod.uid": string(pod.UID)})
	require.NoError(f.t, err)
	var ready []string
	for _, sb := range list {
		f.seen[sb.Id] = true
		if sb.State.String() == "SANDBOX_READY" {
			ready = append(ready, sb.Id)
		}
	}
	require.Len(f.t, ready, 1, "ready sandboxes of %s/%s", pod.Namespace, pod.Name)
	st, err := f.cri.PodStatus(f.ctx, ready[0])
	require.NoError(f.t, err)
	assert.Equal(f.t, f.w.o.NetnsDir, filepath.Dir(st.NetnsPath), "containerd pins netns where the overlay mounts them")
	return ready[0], st
}

// net1 is the address of net1 in the netns ("" and false when absent).
func (f *fixture) net1(netns string) (string, bool) {
	f.t.Helper()
	itf, ok, err := harness.PodIface(netns, "net1")
	require.NoError(f.t, err)
	if !ok || len(itf.Addrs) == 0 {
		return "", ok
	}
	return itf.Addrs[0].String(), true
}

// nodeFiles lists nri-cni's node-local traces of the sandboxes: records,
// host-local address files and libcni cache entries of its network.
func (f *fixture) nodeFiles(ids ...string) []string { return f.w.o.NodeFiles(ids...) }

// nodeFilesAll lists every record, address file of the network and libcni
// cache entry of the network on the node, whoever's.
func (f *fixture) nodeFilesAll() []string {
	o := f.w.o
	pc := harness.PluginConfig{StateDir: o.StateDir, CacheDir: o.CacheDir}
	out := pc.StateFiles()
	for _, c := range pc.CacheFiles() {
		if strings.HasPrefix(filepath.Base(c), o.NetName+"-") {
			out = append(out, c)
		}
	}
	sec := o.Secondary()
	for _, ip := range sec.IPFiles() {
		out = append(out, filepath.Join(sec.IPAMDir, sec.Name, ip))
	}
	return out
}

// seenIDs are the sandbox ids f saw.
func (f *fixture) seenIDs() []string {
	var ids []string
	for id := range f.seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// deletePod deletes a pod through the API and waits until it is gone.
func (f *fixture) deletePod(ns, name string) {
	f.t.Helper()
	require.NoError(f.t, f.k.CoreV1().Pods(ns).Delete(f.ctx, name, metav1.DeleteOptions{}))
	f.waitPodsGone(ns, "metadata.name="+name, "")
}

// waitPodsGone waits until no pod in ns matches the selectors.
func (f *fixture) waitPodsGone(ns, fieldSel, labelSel string) {
	f.t.Helper()
	f.waitFor("pods gone in "+ns, waitLong, func() (bool, string) {
		l, err := f.k.CoreV1().Pods(ns).List(f.ctx, metav1.ListOptions{FieldSelector: fieldSel, LabelSelector: labelSel})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, p := range l.Items {
			names = append(names, p.Name)
		}
		return len(names) == 0, fmt.Sprintf("still there: %v", names)
	})
}

// waitReleased waits until the sandboxes' node-local traces are gone.
func (f *fixture) waitReleased(ids ...string) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("nri-cni's records, addresses and cache entries of %d sandboxes released", len(ids)), waitLong,
		func() (bool, string) {
			left := f.nodeFiles(ids...)
			return len(left) == 0, fmt.Sprintf("left: %v", left)
		})
}

// cleanup deletes f's Deployments and pods (default and kube-system), waits
// for them to be gone and asserts nothing of theirs is left on the node.
func (f *fixture) cleanup() {
	t := f.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f.ctx = ctx
	defer func() {
		if t.Failed() {
			out, _ := f.w.c.Kubectl(ctx, "-n", "kube-system", "logs", "-l", k8sdeploy.Selector, "-c", "nri-cni", "--tail=40")
			t.Logf("nri-cni log tail:\n%s\ncontainerd log tail:\n%s", out, f.w.c.Containerd.LogTail(30))
		}
	}()
	sel := ownerLabel + "=" + f.owner
	if list, err := f.cri.ListPods(ctx, map[string]string{ownerLabel: f.owner}); err == nil {
		for _, sb := range list {
			f.seen[sb.Id] = true
		}
	}
	opts := metav1.ListOptions{LabelSelector: sel}
	bg := metav1.DeletePropagationBackground
	for _, ns := range []string{"default", "kube-system"} {
		err := f.k.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, opts)
		assert.NoError(t, err, "deleting Deployments")
		assert.NoError(t, f.k.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, opts), "deleting pods")
	}
	for _, ns := range []string{"default", "kube-system"} {
		f.waitPodsGone(ns, "", sel)
	}
	f.waitReleased(f.seenIDs()...)
	f.waitFor("the bridge's ports as before", waitLong, func() (bool, string) {
		n, err := harness.BridgePorts(f.w.o.Bridge)
		return err == nil && n == f.ports, fmt.Sprintf("%d ports (had %d), err %v", n, f.ports, err)
	})
}

// nriCNILog is the running nri-cni pod's log (kubectl logs). Just after a
// kubelet or containerd restart the kubelet does not serve it yet (404
// until it has synced the pod again): read until it does.
func (f *fixture) nriCNILog() string {
	f.t.Helper()
	var out string
	f.waitFor("nri-cni's log served by the kubelet", waitLong, func() (bool, string) {
		var err error
		out, err = f.w.d.ReadLog(f.ctx)
		return err == nil, fmt.Sprint(err)
	})
	return out
}

// countLog counts nri-cni's log lines with msg="<msg>" about the sandbox.
func countLog(log, msg, sandbox string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="`+msg+`"`) && strings.Contains(l, "sandbox="+sandbox) {
			n++
		}
	}
	return n
}

// restartNRICNI replaces nri-cni's DaemonSet pod (kubectl rollout restart)
// and waits until the new one is connected to the runtime; it returns the
// new pod's name.
func (f *fixture) restartNRICNI() string {
	f.t.Helper()
	synced := f.w.d.Registrations()
	_, err := f.w.c.Kubectl(f.ctx, "-n", "kube-system", "rollout", "restart", "ds/nri-cni")
	require.NoError(f.t, err)
	_, err = f.w.c.Kubectl(f.ctx, "-n", "kube-system", "rollout", "status", "ds/nri-cni", "--timeout=3m")
	require.NoError(f.t, err)
	pod, err := f.w.d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(f.t, err)
	return pod
}
