package k8s

// Issue 41, item 3, on the real kubelet: a tenant whose pods' attaches are
// slow and fail (each holds a background attach slot for about a minute:
// three slow ADDs, a failing one, a rollback whose DELs hang) fills the
// node's slots from two namespaces. Another namespace's Job (restartPolicy
// Never: a container whose start fails once fails the Job's pod for good)
// must still run, with its network: its container waits in the await hook,
// and its pod's attach, queued behind the others, is run beside the slots in
// time (attach.Background.Urgent) instead of the hook giving up.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// withNRIConf changes nri.conf in the DaemonSet's ConfigMap (read at start)
// and restarts nri-cni; the cleanup puts it back and restarts it again.
func (f *fixture) withNRIConf(change func(conf map[string]any)) {
	f.t.Helper()
	cms := f.k.CoreV1().ConfigMaps("kube-system")
	cm, err := cms.Get(f.ctx, "nri-cni", metav1.GetOptions{})
	require.NoError(f.t, err)
	orig := cm.Data["nri.conf"]
	conf := map[string]any{}
	require.NoError(f.t, yaml.Unmarshal([]byte(orig), &conf))
	change(conf)
	data, err := yaml.Marshal(conf)
	require.NoError(f.t, err)
	cm.Data["nri.conf"] = string(data)
	_, err = cms.Update(f.ctx, cm, metav1.UpdateOptions{})
	require.NoError(f.t, err)
	f.t.Cleanup(func() {
		cm, err := cms.Get(f.ctx, "nri-cni", metav1.GetOptions{})
		require.NoError(f.t, err)
		cm.Data["nri.conf"] = orig
		_, err = cms.Update(f.ctx, cm, metav1.UpdateOptions{})
		require.NoError(f.t, err)
		f.restartNRICNI()
	})
	f.restartNRICNI()
}

func TestSlowNamespacesCannotFailAnotherNamespacesJob(t *testing.T) {
	f := newFixture(t)
	o := f.w.o
	hostile := []string{harness.RandomName("slow-a-"), harness.RandomName("slow-b-")}
	victim := harness.RandomName("victim-")
	// The recording plugin, allowed in these namespaces; the hook at its
	// shortest (40 s), which the hostile attaches' slots outlast.
	f.withNRIConf(func(conf map[string]any) {
		fc, _ := conf["failClosed"].(map[string]any)
		require.NotNil(t, fc, "deploy/base ships failClosed (the await hook)")
		fc["hookTimeout"] = "40s"
		_, nss, err := k8sdeploy.NADPolicyNamespaces(conf)
		require.NoError(t, err)
		for _, ns := range append(hostile, victim) {
			nss[ns] = map[string]any{"types": []string{k8sdeploy.RecorderType}, "bridges": []string{}, "masters": []string{},
				"devices": []string{}, "ipamRanges": []string{}, "paths": []string{o.RecordDir}, "hostGateway": false}
		}
	})
	hold := filepath.Join(o.RecordDir, harness.RandomName("hold-"))
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	unhold := func() { _ = os.Remove(hold) }
	t.Cleanup(unhold) // first of the cleanups below: the hanging DELs end
	record := filepath.Join(o.RecordDir, harness.RandomName("rescue-")+".jsonl")
	t.Cleanup(func() { _ = os.Remove(record) })
	recorder := func(name string, extra map[string]any) string {
		plugin := map[string]any{"type": k8sdeploy.RecorderType, "recordFile": record, "holdOn": "DEL", "holdWhile": hold}
		for k, v := range extra {
			plugin[k] = v
		}
		return toJSON(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{plugin}})
	}

	// Each hostile pod: three ADDs of 9 s each, a fourth that fails, and a
	// rollback whose DELs hang until cniTimeout (10 s each; the failed
	// attach keeps its slot while they run, up to 30 s): about a minute
	// per attach, and the kubelet's retries queue the next.
	for _, ns := range hostile {
		f.namespace(ns)
		for i := 1; i <= 3; i++ {
			f.createNAD(ns, fmt.Sprintf("slow%d", i), recorder(fmt.Sprintf("slow%d-%s", i, ns), map[string]any{"sleep": "9s"}))
		}
		f.createNAD(ns, "broken", recorder("broken-"+ns, map[string]any{"failOn": "ADD", "failMsg": "no leases"}))
	}
	for i, ns := range []string{hostile[0], hostile[0], hostile[0], hostile[1], hostile[1], hostile[1]} {
		f.create(f.pod(fmt.Sprintf("hostile-%d", i), ns, map[string]string{npwgAnnotation: "slow1, slow2, slow3, broken"}))
	}
	f.waitFor("the hostile pods' attaches to hold the node's four slots", waitLong, func() (bool, string) {
		n := 0
		for _, ns := range hostile {
			pods, err := f.k.CoreV1().Pods(ns).List(f.ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					n++
				}
			}
		}
		return n == 6 && countRecorded(record, "ADD") >= 4, fmt.Sprintf("%d hostile pods scheduled, %d ADDs", n, countRecorded(record, "ADD"))
	})

	f.namespace(victim)
	f.createNAD(victim, "quick", recorder("quick-"+victim, nil))
	never, zero := corev1.RestartPolicyNever, int32(0)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: victim, Labels: map[string]string{ownerLabel: f.owner}},
		Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{ownerLabel: f.owner}, Annotations: map[string]string{npwgAnnotation: "quick"}},
			Spec: corev1.PodSpec{RestartPolicy: never, TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "work", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever}}},
		}},
	}
	created := time.Now()
	_, err := f.k.BatchV1().Jobs(victim).Create(f.ctx, job, metav1.CreateOptions{})
	require.NoError(t, err)
	var pod corev1.Pod
	f.waitFor("the victim Job's container running", waitLong, func() (bool, string) {
		j, err := f.k.BatchV1().Jobs(victim).Get(f.ctx, "victim", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if j.Status.Failed > 0 {
			f.t.Fatalf("the victim Job failed although only other namespaces were slow: %s", toJSON(j.Status))
		}
		pods, err := f.k.CoreV1().Pods(victim).List(f.ctx, metav1.ListOptions{LabelSelector: "job-name=victim"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprintf("pods %v, err %v", len(pods.Items), err)
		}
		pod = pods.Items[0]
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Running != nil {
				return true, ""
			}
			if cs.State.Terminated != nil {
				f.t.Fatalf("the victim's container did not start: %s", toJSON(cs.State.Terminated))
			}
		}
		return false, toJSON(pod.Status)
	})
	took := time.Since(created)
	// The recording plugin makes no interface: the attach is what nri-cni
	// reports (network-status) and keeps (its record, attached).
	entries := f.networkStatus(victim, pod.Name, 2)
	assert.Equal(t, victim+"/quick", entries[1].Name, "the victim's pod has its network")
	id, _ := f.readySandbox(&pod)
	assert.NotEmpty(t, f.nodeFiles(id), "nri-cni's record of the victim's sandbox")
	assert.Zero(t, pod.Status.ContainerStatuses[0].RestartCount)
	t.Logf("the victim Job's container ran with its network %s after the Job was created, beside %d hostile pods holding the slots",
		took.Round(time.Millisecond), 6)
	assert.Contains(t, f.nriCNILog(), "rescued", "nri-cni says the victim's attach ran beside the slots")

	unhold()
	require.NoError(t, f.k.BatchV1().Jobs(victim).Delete(f.ctx, "victim", metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}))
}

func ptrTo[T any](v T) *T { return &v }

// countRecorded counts the recording plugin's calls of cmd in file (read
// as it is written: a line being appended is not counted).
func countRecorded(file, cmd string) int {
	data, _ := os.ReadFile(file)
	return strings.Count(string(data), `"cmd":"`+cmd+`"`)
}
