package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/cluster"
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
		p.Annotations = map[string]string{"k8s.v1.cni.cncf.io/networks": nad.Name}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", name, err)
		}
		seen, err := w.Wait(ctx, name, 3*time.Minute)
		if err != nil {
			return fmt.Errorf("%w\nnri-cni's log tail:\n%s", err, tail(d.Log(ctx), 20))
		}
		start, ret, err := runPodSandboxTimes(c.Containerd.LogPath, name)
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

// runPodSandboxTimes reads containerd's log for the start and the return of
// the pod's (first) RunPodSandbox.
func runPodSandboxTimes(logPath, pod string) (start, ret time.Time, err error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return start, ret, err
	}
	needle := `RunPodSandbox for name:\"` + pod + `\"`
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.Contains(l, needle) {
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
		if strings.Contains(l, "returns sandbox id") {
			if ret.IsZero() {
				ret = t
			}
		} else if start.IsZero() {
			start = t
		}
	}
	if start.IsZero() || ret.IsZero() {
		return start, ret, fmt.Errorf("containerd's log has no RunPodSandbox start and return for pod %s", pod)
	}
	return start, ret, nil
}
