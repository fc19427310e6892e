package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

const statusAnnotation = "k8s.v1.cni.cncf.io/network-status"

// benchNetworkStatus: Kubernetes mode's network-status, on the k8s
// section's cluster: n pods, one at a time, each naming a
// NetworkAttachmentDefinition with the NPWG annotation (the NAD has an empty
// spec.config: the example network). Per pod, the delay from containerd's
// RunPodSandbox (its own log line, nanosecond timestamps) to the
// network-status annotation's arrival at a watch (local clock, same
// machine); and from RunPodSandbox's return, to show the status is written
// off the request path. Also the API requests nri-cni made per pod (none of
// them on the attach path: only the status patch).
func benchNetworkStatus(ctx context.Context, rep *report, c *cluster.Cluster, d *k8sdeploy.Deployed, n int) error {
	const s = "6 k8s"
	nads, err := nadclient.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: d.Overlay.NetName, Namespace: "default"}}
	if _, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default").Create(ctx, nad, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating NAD: %w", err)
	}
	defer func() {
		_ = nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default").Delete(context.WithoutCancel(ctx), nad.Name, metav1.DeleteOptions{})
	}()
	w, err := k8sdeploy.WatchPods(ctx, c.Client, "default", benchLabel, func(p *corev1.Pod) bool {
		return p.Annotations[statusAnnotation] != ""
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	var fromStart, fromReturn []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("npwg-%02d", i)
		p := benchPod(name, false, "")
		p.Annotations = map[string]string{npwgNetworks: nad.Name}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", name, err)
		}
		seen, err := w.Wait(ctx, name, 3*time.Minute)
		if err != nil {
			return fmt.Errorf("%w\nnri-cni's log tail:\n%s", err, tail(d.Log(ctx), 20))
		}
		// network-status may be visible before containerd has logged
		// RunPodSandbox's return (it is written off the request path):
		// wait for the lines this reads.
		start, ret, err := waitRunPodSandboxTimes(ctx, c.Containerd.LogPath, name, time.Minute)
		if err != nil {
			return err
		}
		fromStart, fromReturn = append(fromStart, seen.Sub(start)), append(fromReturn, seen.Sub(ret))
	}
	rep.add(Row{Section: s, Metric: fmt.Sprintf("RunPodSandbox start → network-status visible (watch), p50, %d NPWG pods", n),
		Value: pct(fromStart, 50), Unit: "ms", Note: fmt.Sprintf("p95 %.0f ms", pct(fromStart, 95))})
	rep.add(Row{Section: s, Metric: "RunPodSandbox return → network-status visible, p50", Value: pct(fromReturn, 50), Unit: "ms",
		Note: fmt.Sprintf("p95 %.0f ms (negative: visible before the runtime answered the kubelet)", pct(fromReturn, 95))})
	return nil
}

var ctdTimeRe = regexp.MustCompile(`^time="([^"]+)"`)

// waitRunPodSandboxTimes polls runPodSandboxTimes until containerd has
// logged both lines of the pod's RunPodSandbox, or timeout.
func waitRunPodSandboxTimes(ctx context.Context, logPath, pod string, timeout time.Duration) (start, ret time.Time, err error) {
	deadline := time.Now().Add(timeout)
	for {
		if start, ret, err = runPodSandboxTimes(logPath, pod); err == nil || time.Now().After(deadline) {
			return start, ret, err
		}
		select {
		case <-ctx.Done():
			return start, ret, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runPodSandboxTimes reads containerd's log for the start and the return of
// the pod's (first) RunPodSandbox.
func runPodSandboxTimes(logPath, pod string) (start, ret time.Time, err error) {
	err = eachRunPodSandbox(logPath, pod, func(name string, t time.Time, returned bool) {
		if name != pod {
			return
		}
		if returned && ret.IsZero() {
			ret = t
		} else if !returned && start.IsZero() {
			start = t
		}
	})
	if err != nil {
		return start, ret, err
	}
	if start.IsZero() || ret.IsZero() {
		return start, ret, fmt.Errorf("containerd's log has no RunPodSandbox start and return for pod %s", pod)
	}
	return start, ret, nil
}

// eachRunPodSandbox calls f for each line of containerd's log about a
// RunPodSandbox of a pod whose name starts with prefix: the pod, the line's
// time and whether it is the return ("returns sandbox id") or the start.
func eachRunPodSandbox(logPath, prefix string, f func(pod string, t time.Time, returned bool)) error {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return err
	}
	const needle = `RunPodSandbox for name:\"`
	for _, l := range strings.Split(string(data), "\n") {
		i := strings.Index(l, needle+prefix)
		if i < 0 {
			continue
		}
		m := ctdTimeRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(l[i+len(needle):], `\"`)
		f(name, t, strings.Contains(l, "returns sandbox id"))
	}
	return nil
}

// benchHotplug: hot-plug on the k8s section's cluster (its overlay turns
// kubernetes.hotplug on): one running pod on the example network's NAD; n
// times, the NPWG annotation patched to add a second NAD (a bridge of its
// own) and then to remove it, through the API; each time from just before
// the patch call to the interface appearing (or disappearing) in the pod's
// netns (polled every 2 ms). Target: within 1 s.
func benchHotplug(ctx context.Context, rep *report, c *cluster.Cluster, d *k8sdeploy.Deployed, n int) (err error) {
	const s = "6 k8s"
	nads, err := nadclient.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	// A bridge and subnet deploy/base's NAD policy allows.
	second := harness.Secondary{Name: "bench-hotplug", Bridge: k8sdeploy.NADBridge(), Subnet: k8sdeploy.NADSubnet()}
	defer second.DeleteBridge()
	cfg := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q,"isGateway":false,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]]}}]}`,
		second.Name, second.Bridge, second.Subnet)
	api := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default")
	for _, nad := range []*nadv1.NetworkAttachmentDefinition{
		{ObjectMeta: metav1.ObjectMeta{Name: d.Overlay.NetName, Namespace: "default"}},
		{ObjectMeta: metav1.ObjectMeta{Name: second.Name, Namespace: "default"}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: cfg}},
	} {
		if _, err := api.Create(ctx, nad, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating NAD %s: %w", nad.Name, err)
		}
		defer func() { _ = api.Delete(context.WithoutCancel(ctx), nad.Name, metav1.DeleteOptions{}) }()
	}
	p := benchPod("hotplug", false, "")
	p.Annotations = map[string]string{npwgNetworks: d.Overlay.NetName}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return err
	}
	w, err := k8sdeploy.WatchReady(ctx, c.Client, "default", benchLabel)
	if err != nil {
		return err
	}
	defer w.Stop()
	if _, err := w.Wait(ctx, "hotplug", 3*time.Minute); err != nil {
		return err
	}
	cri, err := harness.DialCRI(ctx, c.Containerd.Address)
	if err != nil {
		return err
	}
	defer cri.Close()
	pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "hotplug", metav1.GetOptions{})
	if err != nil {
		return err
	}
	netns, err := k8sdeploy.SandboxNetns(ctx, cri, string(pod.UID))
	if err != nil {
		return err
	}
	// set patches the annotation and waits until net2 is there (want) or gone.
	set := func(value string, want bool) (time.Duration, error) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{npwgNetworks: value}}})
		start := time.Now()
		if _, err := c.Client.CoreV1().Pods("default").Patch(ctx, "hotplug", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return 0, err
		}
		for deadline := start.Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if _, ok, err := harness.PodIface(netns, "net2"); err != nil {
				return 0, err
			} else if ok == want {
				return time.Since(start), nil
			}
		}
		return 0, fmt.Errorf("hot-plug: net2 present=%t not reached in 30 s\nnri-cni's log tail:\n%s", want, tail(d.Log(ctx), 20))
	}
	var add, del []time.Duration
	for i := 0; i < n; i++ {
		a, err := set(d.Overlay.NetName+", "+second.Name, true)
		if err != nil {
			return err
		}
		r, err := set(d.Overlay.NetName, false)
		if err != nil {
			return err
		}
		add, del = append(add, a), append(del, r)
	}
	rep.add(Row{Section: s, Metric: fmt.Sprintf("hot-plug: patch → net2 in the pod, p50, %d additions", n), Value: pct(add, 50), Unit: "ms",
		Note: fmt.Sprintf("p95 %.0f ms; removal p50 %.0f ms, p95 %.0f ms", pct(add, 95), pct(del, 50), pct(del, 95))})
	rep.check(s, "hot-plug: patch → net2 in the pod, p95", pct(add, 95), "ms", 1000, "<= 1000 ms")
	return nil
}

const npwgNetworks = "k8s.v1.cni.cncf.io/networks"
