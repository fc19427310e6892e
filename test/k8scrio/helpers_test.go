package k8scrio

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"sort"
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
	// ownerLabel marks every object a test creates with the test's token
	// (pods, and through the kubelet their sandboxes); the cleanup deletes
	// by it.
	ownerLabel = "k8scrio-test.nri-cni.io/owner"
	// Generous: a loaded 2-core machine.
	waitLong = 3 * time.Minute
)

// fixture is one test's view of the shared cluster. Its cleanup deletes
// the test's pods through the API, waits for them to be gone and asserts
// that nri-cni's node-local traces of every sandbox the test saw (records,
// address files, libcni cache entries) are gone and nri-cni's bridge has
// the ports it had before.
type fixture struct {
	t     *testing.T
	w     *env
	ctx   context.Context
	k     kubernetes.Interface
	cri   *harness.CRI
	obs   *harness.Observer
	owner string
	seen  map[string]bool // sandbox ids
	ports int             // bridge ports at the start
}

func newFixture(t *testing.T) *fixture {
	w := needWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	cri, err := harness.DialCRI(ctx, w.c.Runtime().CRIAddress())
	require.NoError(t, err)
	obs, err := w.observer(ctx, false)
	require.NoError(t, err)
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Name()))
	f := &fixture{t: t, w: w, ctx: ctx, k: w.c.Client, cri: cri, obs: obs, owner: fmt.Sprintf("t%x", h.Sum64()),
		seen: map[string]bool{}}
	f.ports, err = harness.BridgePorts(w.o.Bridge)
	require.NoError(t, err)
	t.Cleanup(func() { f.cleanup(); cri.Close() })
	return f
}

// pod is a pause pod labelled as f's in namespace default.
func (f *fixture) pod(name string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{ownerLabel: f.owner},
			Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// create creates the pod through the API.
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

// waitReady waits for the pod (default namespace) to be Running and Ready.
func (f *fixture) waitReady(name string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.waitFor("pod "+name+" Ready", waitLong, func() (bool, string) {
		p, err := f.k.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return k8sdeploy.PodReady(p), fmt.Sprintf("phase %s, conditions %v, events %q", p.Status.Phase, p.Status.Conditions,
			f.events(name))
	})
	return pod
}

// events are the pod's events as "Reason: message".
func (f *fixture) events(pod string) []string {
	evs, err := f.k.CoreV1().Events("default").List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, ev := range evs.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return out
}

// readySandbox is the pod's one ready sandbox through CRI: its id and
// status (netns path, pid as CRI-O reports it).
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
	require.Len(f.t, ready, 1, "ready sandboxes of %s", pod.Name)
	st, err := f.cri.PodStatus(f.ctx, ready[0])
	require.NoError(f.t, err)
	if !pod.Spec.HostNetwork {
		assert.Equal(f.t, f.w.o.NetnsDir, filepath.Dir(st.NetnsPath), "CRI-O pins netns where the overlay mounts them")
	}
	return ready[0], st
}

// iface is the interface of the pod's ready sandbox (asserting it exists
// with an address).
func (f *fixture) iface(pod *corev1.Pod, ifname string) harness.Iface {
	f.t.Helper()
	_, st := f.readySandbox(pod)
	itf, ok, err := harness.PodIface(st.NetnsPath, ifname)
	require.NoError(f.t, err)
	require.True(f.t, ok, "%s in %s", ifname, pod.Name)
	require.NotEmpty(f.t, itf.Addrs, "%s has an address", ifname)
	return itf
}

// deletePod deletes a pod (default namespace) and waits until it is gone.
func (f *fixture) deletePod(name string) {
	f.t.Helper()
	require.NoError(f.t, f.k.CoreV1().Pods("default").Delete(f.ctx, name, metav1.DeleteOptions{}))
	f.waitPodsGone("metadata.name="+name, "")
}

// waitPodsGone waits until no pod in default matches the selectors.
func (f *fixture) waitPodsGone(fieldSel, labelSel string) {
	f.t.Helper()
	f.waitFor("pods gone", waitLong, func() (bool, string) {
		l, err := f.k.CoreV1().Pods("default").List(f.ctx, metav1.ListOptions{FieldSelector: fieldSel, LabelSelector: labelSel})
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
			left := f.w.o.NodeFiles(ids...)
			return len(left) == 0, fmt.Sprintf("left: %v", left)
		})
}

// cleanup deletes f's pods, waits for them to be gone and asserts nothing
// of theirs is left on the node and nri-cni's bridge has its ports back.
func (f *fixture) cleanup() {
	t := f.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f.ctx = ctx
	defer func() {
		if t.Failed() {
			out, _ := f.w.c.Kubectl(ctx, "-n", "kube-system", "logs", "-l", k8sdeploy.Selector, "-c", "nri-cni", "--tail=40")
			t.Logf("nri-cni log tail:\n%s\ncrio log tail:\n%s", out, f.w.c.Runtime().LogTail(30))
		}
	}()
	if list, err := f.cri.ListPods(ctx, map[string]string{ownerLabel: f.owner}); err == nil {
		for _, sb := range list {
			f.seen[sb.Id] = true
		}
	}
	sel := ownerLabel + "=" + f.owner
	assert.NoError(t, f.k.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: sel}), "deleting pods")
	f.waitPodsGone("", sel)
	f.waitReleased(f.seenIDs()...)
	f.waitFor("the bridge's ports as before", waitLong, func() (bool, string) {
		n, err := harness.BridgePorts(f.w.o.Bridge)
		return err == nil && n == f.ports, fmt.Sprintf("%d ports (had %d), err %v", n, f.ports, err)
	})
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

// nriCNILog is the running nri-cni pod's log (kubectl logs), read until the
// kubelet serves it (not at once after a runtime restart).
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

// event waits until the observer has recorded the NRI event (e.g.
// StopPodSandbox) for the sandbox and returns the first.
func (f *fixture) event(name, sandbox string) harness.PodEvent {
	f.t.Helper()
	var ev harness.PodEvent
	f.waitFor("NRI "+name+" of sandbox "+sandbox+" seen by the observer", waitLong, func() (bool, string) {
		evs := f.obs.Of(sandbox)
		for _, e := range evs {
			if e.Event == name {
				ev = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("events %+v", evs)
	})
	return ev
}
