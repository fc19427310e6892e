package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// benchUpgrade: 11. fail-closed through a rolling upgrade (issue 27). On a
// single-node cluster set up as deploy/node says (NRI's default validator)
// with nri-cni from deploy/base, n annotated pods are created at once, each
// with a container that exits 1 at once without net1: on a quiet node, and
// while the DaemonSet rolls out to a new image tag (`kubectl set image`,
// maxUnavailable 1, maxSurge 0), in rounds. Measured: each pod's create →
// Ready (watch event arrival), the ratio of p50s and p99s of the upgrade
// storm to the quiet one, how long the node had no nri-cni serving (old pod
// deleted → new pod Ready), and the containers that ran without net1
// (their restarts: must be 0). Then the await hook's cost: quiet storms
// with failClosed.hookSocket off (containers wait inside CreateContainer)
// and on, interleaved.
func benchUpgrade(ctx context.Context, e *env, rep *report, n, rounds int) (err error) {
	const s = "11 upgrade"
	w, err := startK8sWorld(ctx, e, filepath.Join(e.dir, "upgrade"), nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.close(context.WithoutCancel(ctx))) }()
	c, d := w.c, w.d
	defer func() { err = errors.Join(err, deleteBenchPods(context.WithoutCancel(ctx), c, d.Overlay)) }()
	tags := []string{k8sdeploy.ImageTag, "localhost/nri-cni:bench-upgrade"}
	if err := c.TagImage(ctx, tags[0], tags[1]); err != nil {
		return err
	}
	watch, err := k8sdeploy.WatchReady(ctx, c.Client, "default", benchLabel)
	if err != nil {
		return err
	}
	defer watch.Stop()

	var quiet, upgrade []time.Duration
	var unserved []time.Duration
	restarts := 0
	for r := range rounds {
		q, rs, err := upgradeStorm(ctx, w, watch, fmt.Sprintf("q%d-", r), n, nil)
		if err != nil {
			return err
		}
		quiet, restarts = append(quiet, q...), restarts+rs
		var gap time.Duration
		roll := func() error {
			g, err := rollImage(ctx, w, tags[(r+1)%2])
			gap = g
			return err
		}
		u, rs, err := upgradeStorm(ctx, w, watch, fmt.Sprintf("u%d-", r), n, roll)
		if err != nil {
			return err
		}
		upgrade, unserved, restarts = append(upgrade, u...), append(unserved, gap), restarts+rs
		fmt.Printf("    round %d: quiet p50 %.0f ms p99 %.0f ms; upgrade p50 %.0f ms p99 %.0f ms; node without nri-cni %s\n",
			r+1, pct(q, 50), pct(q, 99), pct(u, 50), pct(u, 99), gap.Round(100*time.Millisecond))
	}
	rep.add(Row{Section: s, Metric: fmt.Sprintf("create→Ready p50, %d pods on a quiet node", n), Value: pct(quiet, 50), Unit: "ms"})
	rep.add(Row{Section: s, Metric: fmt.Sprintf("create→Ready p50, %d pods during the rollout", n), Value: pct(upgrade, 50), Unit: "ms"})
	rep.add(Row{Section: s, Metric: "create→Ready p99, quiet / during the rollout", Value: pct(quiet, 99), Unit: "ms",
		Note: fmt.Sprintf("%.0f ms during the rollout", pct(upgrade, 99))})
	rep.add(Row{Section: s, Metric: "node without a serving nri-cni per rollout, median", Value: pct(unserved, 50), Unit: "ms"})
	rep.check(s, "containers that ran without net1 (restarts)", float64(restarts), "", 0, "= 0")

	// The await hook's cost on a quiet node: off, then on, per round.
	var off, on []time.Duration
	for r := range rounds {
		for _, hook := range []bool{false, true} {
			if err := setHook(ctx, w, hook); err != nil {
				return err
			}
			q, rs, err := upgradeStorm(ctx, w, watch, fmt.Sprintf("h%d%t-", r, hook), n, nil)
			if err != nil {
				return err
			}
			restarts += rs
			if hook {
				on = append(on, q...)
			} else {
				off = append(off, q...)
			}
		}
	}
	rep.check(s, "create→Ready p50, await hook on / off (quiet storms)", pct(on, 50)/pct(off, 50), "x", 1.10, "<= 1.10x")
	rep.add(Row{Section: s, Metric: "create→Ready p99, await hook on / off", Value: pct(on, 99) / pct(off, 99), Unit: "x",
		Note: fmt.Sprintf("p50 %.0f / %.0f ms", pct(on, 50), pct(off, 50))})
	return nil
}

// hookLine is the await hook's socket line in the overlay's nri.conf.
var hookLine = regexp.MustCompile(`(?m)^(\s*hookSocket:) .*$`)

// setHook turns failClosed.hookSocket on (the overlay's socket) or off in
// nri-cni's ConfigMap and restarts nri-cni.
func setHook(ctx context.Context, w *k8sWorld, on bool) error {
	cm, err := w.c.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "nri-cni", metav1.GetOptions{})
	if err != nil {
		return err
	}
	line := hookLine.FindString(cm.Data["nri.conf"])
	if line == "" {
		return fmt.Errorf("nri-cni's nri.conf has no hookSocket line")
	}
	want := strings.SplitN(line, ":", 2)[0] + ": " + filepath.Join(w.d.Overlay.RunDir, "await.sock")
	if !on {
		want = strings.SplitN(line, ":", 2)[0] + `: ""`
	}
	if line == want {
		return nil
	}
	return w.setConf(ctx, line, want)
}

// upgradeStorm creates n checked pods at once (while during, if set, runs
// beside them), waits until all are Ready, and returns each one's create →
// Ready, the restarts of their containers (a container that ran without
// net1), then deletes them.
func upgradeStorm(ctx context.Context, w *k8sWorld, watch *k8sdeploy.ReadyWatch, prefix string, n int,
	during func() error) ([]time.Duration, int, error) {
	c, net := w.c, w.d.Overlay.NetName
	names := make([]string, n)
	created := make([]time.Time, n)
	errs := make(chan error, n+1)
	var wg sync.WaitGroup
	if during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- during() }()
	}
	for i := range names {
		names[i] = harness.RandomName(prefix)
		p := benchPod(names[i], true, net)
		p.Spec.Containers[0].Command = []string{"/pause", "--require-iface", "net1"}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			created[i] = time.Now()
			_, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, 0, err
		}
	}
	took := make([]time.Duration, n)
	for i, name := range names {
		at, err := watch.Wait(ctx, name, 5*time.Minute)
		if err != nil {
			return nil, 0, err
		}
		took[i] = at.Sub(created[i])
	}
	restarts := 0
	list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: benchLabel})
	if err != nil {
		return nil, 0, err
	}
	for _, p := range list.Items {
		for _, cs := range p.Status.ContainerStatuses {
			restarts += int(cs.RestartCount)
		}
	}
	return took, restarts, deleteBenchPods(ctx, c, w.d.Overlay)
}

// rollImage sets nri-cni's DaemonSet to tag, waits for the rollout, and
// returns how long the node had no serving nri-cni: from the old pod's
// deletion to the new one's Ready.
func rollImage(ctx context.Context, w *k8sWorld, tag string) (time.Duration, error) {
	c, d := w.c, w.d
	pods, err := d.Pods(ctx)
	if err != nil || len(pods) != 1 {
		return 0, fmt.Errorf("nri-cni's pod before the rollout: %v (%d pods)", err, len(pods))
	}
	old := pods[0].Name
	synced := d.Registrations()
	if _, err := c.Kubectl(ctx, "-n", "kube-system", "set", "image", "ds/nri-cni", "nri-cni="+tag, "install-cni-plugins="+tag,
		"install-hook="+tag); err != nil {
		return 0, err
	}
	var gone time.Time
	for gone.IsZero() {
		p, err := c.Client.CoreV1().Pods("kube-system").Get(ctx, old, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			gone = time.Now()
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := d.WaitReady(ctx, synced+1, 5*time.Minute); err != nil {
		return 0, err
	}
	return time.Since(gone), nil
}
