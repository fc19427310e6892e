package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// benchDRA: pod create → Ready through the real kubelet and scheduler with
// the example network from a ResourceClaimTemplate (the scheduler
// allocates a device, the kubelet prepares the claim through nri-cni's DRA
// driver, RunPodSandbox attaches it) vs with nri-cni's annotation (the same
// network, no DRA), n pods each, one at a time, alternating which goes
// first; and create → the claim's status.devices written.
func benchDRA(ctx context.Context, rep *report, c *cluster.Cluster, d *k8sdeploy.Deployed, n int) error {
	const s = "6 k8s"
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "bench-net", Namespace: "default"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "net", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.DriverName,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf(
					`device.attributes[%q].%s == %q`, dra.DriverName, dra.AttrNetwork, d.Overlay.NetName)}}}}}}}}}}
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the claim template: %w", err)
	}
	defer func() {
		_ = c.Client.ResourceV1().ResourceClaimTemplates("default").Delete(context.WithoutCancel(ctx), tmpl.Name, metav1.DeleteOptions{})
	}()
	w, err := k8sdeploy.WatchReady(ctx, c.Client, "default", benchLabel)
	if err != nil {
		return err
	}
	defer w.Stop()
	start := func(name string, claim bool) (ready, status time.Duration, err error) {
		p := benchPod(name, !claim, d.Overlay.NetName)
		if claim {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &tmpl.Name}}
		}
		t0 := time.Now()
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return 0, 0, fmt.Errorf("creating pod %s: %w", name, err)
		}
		at, err := w.Wait(ctx, name, 3*time.Minute)
		if err != nil {
			return 0, 0, err
		}
		if !claim {
			return at.Sub(t0), 0, nil
		}
		st, err := claimStatusWritten(ctx, c, name)
		return at.Sub(t0), st.Sub(t0), err
	}
	for _, claim := range []bool{true, false} { // warm-up, not counted
		if _, _, err := start(fmt.Sprintf("dra-warm-%t", claim), claim); err != nil {
			return err
		}
	}
	var withClaim, withAnnotation, status []time.Duration
	for i := 0; i < n; i++ {
		for _, claim := range []bool{i%2 == 0, i%2 != 0} {
			name := fmt.Sprintf("dra-ann-%02d", i)
			if claim {
				name = fmt.Sprintf("dra-claim-%02d", i)
			}
			ready, st, err := start(name, claim)
			if err != nil {
				return fmt.Errorf("%w\nnri-cni's log tail:\n%s", err, tail(d.Log(ctx), 20))
			}
			if claim {
				withClaim, status = append(withClaim, ready), append(status, st)
			} else {
				withAnnotation = append(withAnnotation, ready)
			}
		}
	}
	_, added := paired(withAnnotation, withClaim)
	rep.add(Row{Section: s, Metric: fmt.Sprintf("create→Ready p50, %d pods with net1 from the annotation", n),
		Value: pct(withAnnotation, 50), Unit: "ms", Note: fmt.Sprintf("p95 %.0f ms", pct(withAnnotation, 95))})
	rep.add(Row{Section: s, Metric: fmt.Sprintf("create→Ready p50, %d pods with net1 from a ResourceClaim", n),
		Value: pct(withClaim, 50), Unit: "ms", Note: fmt.Sprintf("p95 %.0f ms; added per pod (paired median) %.1f ms", pct(withClaim, 95), added)})
	rep.add(Row{Section: s, Metric: "create→Ready ratio of p50s, claim / annotation", Value: pct(withClaim, 50) / pct(withAnnotation, 50),
		Unit: "x", Note: fmt.Sprintf("p95s %.2fx", pct(withClaim, 95)/pct(withAnnotation, 95))})
	rep.add(Row{Section: s, Metric: "create→claim status.devices written, p50", Value: pct(status, 50), Unit: "ms",
		Note: fmt.Sprintf("p95 %.0f ms", pct(status, 95))})
	return nil
}

// claimStatusWritten polls the pod's claim until nri-cni's status.devices
// entry is there and returns when it saw it.
func claimStatusWritten(ctx context.Context, c *cluster.Cluster, pod string) (time.Time, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err == nil && len(p.Status.ResourceClaimStatuses) == 1 && p.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
			cl, err := c.Client.ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			if err == nil && len(cl.Status.Devices) > 0 {
				return time.Now(), nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("pod %s: its claim's status.devices not written within a minute", pod)
}
