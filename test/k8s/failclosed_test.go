package k8s

// Fail-closed while nri-cni is away (issue 27): pods that ask for networks
// never run a container before their networks are attached, also while
// nri-cni installs, restarts, is killed or is upgraded. The node's
// containerd runs with deploy/node's drop-in (NRI's default validator) and
// deploy/base's MutatingAdmissionPolicy makes every annotated pod require
// nri-cni. Each test pod's container is `pause --require-iface net1`: it
// exits 1 at its first instruction when net1 is missing, so a window shows
// up as a restart and cannot hide.

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

const (
	// requiredAnnotation is what the policy adds to pods that ask.
	requiredAnnotation = "required-plugins.noderesource.dev/pod"
	// validatorRefusal is the runtime's CreateContainer error while
	// nri-cni is away.
	validatorRefusal = `required plugin "nri-cni" not present`
)

// checkedPod is an annotated pod whose container checks net1 at its first
// instruction.
func (f *fixture) checkedPod(name string) *corev1.Pod {
	p := f.pod(name, "default", map[string]string{k8sdeploy.Annotation: f.w.o.NetName})
	p.Spec.Containers[0].Command = []string{"/pause", "--require-iface", "net1"}
	return p
}

// storm creates n checked pods at once and returns their names and when
// each was created.
func (f *fixture) storm(prefix string, n int) ([]string, map[string]time.Time) {
	f.t.Helper()
	names := make([]string, n)
	created := map[string]time.Time{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range names {
		names[i] = harness.RandomName(prefix)
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			_, err := f.k.CoreV1().Pods("default").Create(f.ctx, f.checkedPod(name), metav1.CreateOptions{})
			mu.Lock()
			created[name] = time.Now()
			mu.Unlock()
			errs <- err
		}(names[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(f.t, err)
	}
	return names, created
}

// assertNeverWithout waits until every pod is Ready and asserts that each
// one's container never ran without net1 (no restart, no earlier
// termination but nri-cni's await hook refusing its start), that the policy made it require nri-cni, and that net1 is
// in its sandbox. It returns each pod's create→Ready time.
func (f *fixture) assertNeverWithout(names []string, created map[string]time.Time) map[string]time.Duration {
	f.t.Helper()
	took, missed := f.assertReadyWithNet1(names, created)
	assert.Empty(f.t, missed, "pods the admission policy did not make require nri-cni")
	return took
}

// assertReadyWithNet1 is assertNeverWithout for the pods the policy made
// require nri-cni; those it did not (missed) are only waited for, Ready
// with net1 (installing nri-cni: a pod created in the policy's first
// second).
func (f *fixture) assertReadyWithNet1(names []string, created map[string]time.Time) (map[string]time.Duration, []string) {
	f.t.Helper()
	took := map[string]time.Duration{}
	var missed []string
	for _, name := range names {
		p := f.waitReady("default", name)
		took[name] = readySince(p, created[name])
		if p.Annotations[requiredAnnotation] != `["nri-cni"]` {
			missed = append(missed, name)
			_, st := f.readySandbox(p)
			f.waitFor(name+": net1 (attached at nri-cni's resync)", waitLong, func() (bool, string) {
				_, ok := f.net1(st.NetnsPath)
				return ok, "no net1"
			})
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			t := cs.LastTerminationState.Terminated
			if t != nil && refusedByAwait(t) && cs.RestartCount == 1 {
				// Created while the pod's attach ran, then refused by
				// nri-cni's createRuntime hook when that attach failed
				// (a bridge ADD past cniTimeout under load): the process
				// never started; the kubelet's one retry found net1.
				f.t.Logf("%s: container %s refused before its process started, then restarted: %s", name, cs.Name, t.Message)
				continue
			}
			assert.Zero(f.t, cs.RestartCount, "%s: container %s started without net1 (restarted)", name, cs.Name)
			if t != nil {
				f.t.Errorf("%s: container %s ran without net1 before: exit %d %s", name, cs.Name, t.ExitCode, t.Message)
			}
		}
		_, st := f.readySandbox(p)
		_, ok := f.net1(st.NetnsPath)
		assert.True(f.t, ok, "%s: net1 in the sandbox", name)
	}
	return took, missed
}

// refusedByAwait: a termination that is the runtime failing to create the
// container's task because nri-cni's await hook (createRuntime, which runs
// before the container's process exists) refused it, the pod's networks
// not attached: no process ran.
func refusedByAwait(t *corev1.ContainerStateTerminated) bool {
	return t.ExitCode == 128 && strings.Contains(t.Message, "error running createRuntime hook") &&
		strings.Contains(t.Message, "nri-cni: await: pod sandbox")
}

// readySince is how long after created the pod's Ready condition turned true.
func readySince(p *corev1.Pod, created time.Time) time.Duration {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Sub(created.Truncate(time.Second))
		}
	}
	return 0
}

// refused counts the pods whose container the runtime refused because
// nri-cni was not there (waiting with the validator's error now, or an
// Event saying so).
func (f *fixture) refused(names []string) int {
	n := 0
	for _, name := range names {
		p, err := f.k.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && strings.Contains(w.Message, validatorRefusal) {
				n++
				break
			}
		}
	}
	return n
}

// deleteAll deletes the pods and waits for them and their node files to go.
func (f *fixture) deleteAll(names []string) {
	f.t.Helper()
	for _, name := range names {
		require.NoError(f.t, f.k.CoreV1().Pods("default").Delete(f.ctx, name, metav1.DeleteOptions{}))
	}
	f.waitPodsGone("default", "", ownerLabel+"="+f.owner)
	f.waitReleased(f.seenIDs()...)
}

func logTimes(t *testing.T, what string, took map[string]time.Duration) {
	var ds []time.Duration
	for _, d := range took {
		ds = append(ds, d)
	}
	t.Logf("%s: create→Ready of %d pods: %s", what, len(ds), summarize(ds))
}

// TestFailClosedInstall: nri-cni installed from scratch (`kubectl apply -k`)
// and 20 annotated pods created at once right after: none that requires
// nri-cni runs a container before nri-cni serves and attaches its net1;
// `kubectl rollout status` returns only once nri-cni serves (its readiness
// probe). The API server takes up to a second to enforce a new admission
// policy (it reloads them once a second): a pod created in that second may
// miss it and is not protected; it gets net1 at nri-cni's resync. The test
// counts them (docs/failure-semantics.md).
func TestFailClosedInstall(t *testing.T) {
	f := newFixture(t)
	d := f.w.d
	require.NoError(t, d.Undeploy(f.ctx))
	deployed := false
	t.Cleanup(func() {
		if !deployed {
			_, _ = f.w.c.Kubectl(f.ctx, "apply", "-k", f.w.o.Dir)
			_, _ = d.WaitReady(f.ctx, 1, waitLong)
		}
	})
	synced := d.Registrations()
	out, err := f.w.c.Kubectl(f.ctx, "apply", "-k", f.w.o.Dir)
	require.NoError(t, err, out)
	deployed = true
	names, created := f.storm("install-", 20)

	// The DaemonSet controller has seen the node, then rollout status.
	f.waitFor("the DaemonSet wants its pod", waitLong, func() (bool, string) {
		out, err := f.w.c.Kubectl(f.ctx, "-n", "kube-system", "get", "ds/nri-cni", "-o", "jsonpath={.status.desiredNumberScheduled}")
		return err == nil && out == "1", out
	})
	_, err = f.w.c.Kubectl(f.ctx, "-n", "kube-system", "rollout", "status", "ds/nri-cni", "--timeout=3m")
	require.NoError(t, err)
	pod, err := d.WaitReady(f.ctx, synced+1, time.Second)
	require.NoError(t, err, "rollout status returned: nri-cni's pod is Ready and registered")
	require.Contains(t, d.Log(f.ctx), "resync with the runtime done", "Ready means synchronized")
	t.Logf("nri-cni's pod %s Ready; %d of %d pods had a container refused meanwhile", pod, f.refused(names), len(names))

	took, missed := f.assertReadyWithNet1(names, created)
	logTimes(t, "install", took)
	t.Logf("%d of %d pods created right after kubectl apply missed the admission policy's first second: %v", len(missed), len(names), missed)
	f.deleteAll(names)
}

// TestFailClosedWhileAway: nri-cni's pod gone from the node (as in every
// rolling upgrade, crash or eviction) while annotated pods are created:
// their sandboxes start, their containers are refused by the runtime; when
// nri-cni is back they start with net1, none ever without it.
func TestFailClosedWhileAway(t *testing.T) {
	f := newFixture(t)
	restore := f.sendNRICNIAway()
	names, created := f.storm("away-", 10)
	f.waitFor("the runtime refusing the pods' containers", waitLong, func() (bool, string) {
		n := f.refused(names)
		return n == len(names), fmt.Sprintf("%d of %d refused", n, len(names))
	})
	for _, name := range names {
		p, err := f.k.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.False(t, k8sdeploy.PodReady(p), "%s not Ready while nri-cni is away", name)
	}
	back := time.Now()
	restore()
	took := f.assertNeverWithout(names, created)
	logTimes(t, "created while away", took)
	t.Logf("all Ready %s after nri-cni was sent back", since(back))
	f.deleteAll(names)
}

// sendNRICNIAway moves nri-cni's DaemonSet off the node (a nodeSelector no
// node has) and waits until its pod is gone; the returned func brings it
// back and waits until it serves (also run at cleanup if the test did not).
func (f *fixture) sendNRICNIAway() func() {
	f.t.Helper()
	back, err := f.w.d.Away(f.ctx)
	restore := func() { require.NoError(f.t, back(f.ctx), "nri-cni back and serving") }
	f.t.Cleanup(restore)
	require.NoError(f.t, err)
	return restore
}

// TestFailClosedKilledMidStorm: nri-cni SIGKILLed while 20 annotated pods
// are being created: the kubelet restarts it; every pod gets net1 before
// its container starts, none is left half attached.
func TestFailClosedKilledMidStorm(t *testing.T) {
	f := newFixture(t)
	d := f.w.d
	pid, err := d.Pid(f.ctx)
	require.NoError(t, err)
	synced := d.Registrations()
	var names []string
	var created map[string]time.Time
	done := make(chan struct{})
	go func() { defer close(done); names, created = f.storm("killed-", 20) }()
	// Mid-storm: once the first sandboxes exist.
	f.waitFor("the storm's first sandboxes", waitLong, func() (bool, string) {
		list, err := f.cri.ListPods(f.ctx, map[string]string{ownerLabel: f.owner})
		return err == nil && len(list) >= 3, fmt.Sprintf("%d sandboxes", len(list))
	})
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	t.Logf("nri-cni (pid %d) SIGKILLed mid-storm", pid)
	<-done
	_, err = d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err, "the kubelet restarted nri-cni")
	logTimes(t, "killed mid-storm", f.assertNeverWithout(names, created))
	f.deleteAll(names)
}

// TestFailClosedUpgrade: nri-cni rolled out to a new image tag (kubectl set
// image) during a storm of 30 annotated pods: none runs a container without
// net1, none fails for good, nothing leaks; the create→Ready times beside a
// storm on a quiet node are logged (make bench measures them properly).
func TestFailClosedUpgrade(t *testing.T) {
	f := newFixture(t)
	w := f.w
	const upgraded = "localhost/nri-cni:upgrade"
	require.NoError(t, w.c.TagImage(f.ctx, k8sdeploy.ImageTag, upgraded))
	setImage := func(tag string) {
		_, err := w.c.Kubectl(f.ctx, "-n", "kube-system", "set", "image", "ds/nri-cni", "nri-cni="+tag, "install-cni-plugins="+tag)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		synced := w.d.Registrations()
		setImage(k8sdeploy.ImageTag)
		_, err := w.d.WaitReady(f.ctx, synced+1, waitLong)
		assert.NoError(t, err)
	})

	quiet, quietCreated := f.storm("quiet-", 30)
	quietTook := f.assertNeverWithout(quiet, quietCreated)
	f.deleteAll(quiet)

	synced := w.d.Registrations()
	var names []string
	var created map[string]time.Time
	done := make(chan struct{})
	go func() { defer close(done); names, created = f.storm("upgrade-", 30) }()
	setImage(upgraded)
	<-done
	_, err := w.c.Kubectl(f.ctx, "-n", "kube-system", "rollout", "status", "ds/nri-cni", "--timeout=3m")
	require.NoError(t, err)
	_, err = w.d.WaitReady(f.ctx, synced+1, waitLong)
	require.NoError(t, err)
	took := f.assertNeverWithout(names, created)
	logTimes(t, "quiet node", quietTook)
	logTimes(t, "during the upgrade", took)
	f.deleteAll(names)
}

// summarize is "p50 X, max Y" of ds.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return fmt.Sprintf("p50 %s, max %s", ds[len(ds)/2].Round(100*time.Millisecond), ds[len(ds)-1].Round(100*time.Millisecond))
}
