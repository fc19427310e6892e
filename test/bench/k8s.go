package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

const benchLabel = "nri-cni.io/bench"

// benchK8s: 6. pod start latency through a real kubelet, from the API
// create call, on a single-node cluster with nri-cni deployed from
// deploy/base: n pods annotated with the example network (net1) vs n pods
// without the annotation (opted out: nri-cni sees them and does nothing),
// same node, one pod at a time, alternating which kind goes first in each
// pair. Each time is the arrival of a watch event (the API's timestamps
// have 1 s resolution): the pod's Ready status (what users wait for; the
// kubelet learns that the container runs from its PLEG relist, every 1 s,
// so this is quantised to that period), and the kubelet's Pulled (the
// sandbox is up, nri-cni's attach included) and Started events, which it
// sends as the work happens. Then the RSS of the control plane, the kubelet,
// containerd and nri-cni with all pods running, and nri-cni's own attach
// times from its log.
func benchK8s(ctx context.Context, e *env, rep *report, n int) (err error) {
	const s = "6 k8s"
	load0 := loadAvg()
	w0, err := startK8sWorld(ctx, e, filepath.Join(e.dir, "k8s"), nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w0.close(context.WithoutCancel(ctx))) }()
	c, d := w0.c, w0.d
	defer func() { err = errors.Join(err, deleteBenchPods(context.WithoutCancel(ctx), c, d.Overlay)) }()

	w, err := k8sdeploy.WatchReady(ctx, c.Client, "default", benchLabel)
	if err != nil {
		return err
	}
	defer w.Stop()
	evs, err := k8sdeploy.WatchEvents(ctx, c.Client, "default")
	if err != nil {
		return err
	}
	defer evs.Stop()
	// start creates one pod and times, from just before the create call, the
	// arrival of its Ready status and of the kubelet's Pulled (sandbox up,
	// nri-cni's attach included; the image is present) and Started events.
	start := func(name string, annotated bool) (t timings, err error) {
		t0 := time.Now()
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, benchPod(name, annotated, d.Overlay.NetName),
			metav1.CreateOptions{}); err != nil {
			return t, fmt.Errorf("creating pod %s: %w", name, err)
		}
		ready, err := w.Wait(ctx, name, 3*time.Minute)
		if err != nil {
			return t, err
		}
		pulled, err := evs.Wait(ctx, name, "Pulled", time.Minute)
		if err != nil {
			return t, err
		}
		started, err := evs.Wait(ctx, name, "Started", time.Minute)
		return timings{ready: ready.Sub(t0), sandbox: pulled.Sub(t0), started: started.Sub(t0)}, err
	}
	// One pod of each kind first, not counted: the first pods pay for cold
	// caches (image, kubelet, nri-cni's config) on either side.
	for _, annotated := range []bool{true, false} {
		if _, err := start(fmt.Sprintf("warm-%t", annotated), annotated); err != nil {
			return err
		}
	}
	var with, without timings3
	for i := 0; i < n; i++ {
		order := []bool{i%2 == 0, i%2 != 0}
		for _, annotated := range order {
			name := fmt.Sprintf("plain-%02d", i)
			if annotated {
				name = fmt.Sprintf("net1-%02d", i)
			}
			t, err := start(name, annotated)
			if err != nil {
				return fmt.Errorf("%w\nnri-cni's log tail:\n%s", err, tail(d.Log(ctx), 20))
			}
			if annotated {
				with.add(t)
			} else {
				without.add(t)
			}
		}
	}
	if err := checkNet1(ctx, c, d.Overlay.Secondary(), 2*n+2, n+1); err != nil {
		return err
	}
	rss := c.RSS()
	pid, err := d.Pid(ctx)
	if err != nil {
		return err
	}
	nriRSS, err := rssKiB(pid)
	if err != nil {
		return err
	}
	attach := attachDurations(d.Log(ctx))
	// The next parts create pods of their own: the kubelet runs at most 110
	// (maxPods), nri-cni's included.
	if err := deleteBenchPods(ctx, c, d.Overlay); err != nil {
		return err
	}
	if err := benchNetworkStatus(ctx, rep, c, d, 20); err != nil {
		return err
	}
	if err := benchHotplug(ctx, rep, c, d, 20); err != nil {
		return err
	}
	if err := benchDRA(ctx, rep, c, d, n); err != nil {
		return err
	}

	// The floor: a pod with net1 cannot be Ready sooner than one without
	// plus net1's own ADD (a bridge network like the node's, through
	// libcni alone on this node, in the same run).
	addP50, err := bridgeADDp50(ctx, e, n)
	if err != nil {
		return err
	}
	floorOf := func(a []time.Duration) float64 { return 1 + addP50/pct(a, 50) }
	rep.add(Row{Section: s, Metric: "floor: a bridge network's ADD through libcni alone, p50", Value: addP50, Unit: "ms",
		Note: fmt.Sprintf("measured in the same run: create→Ready floor %.3fx, create→Started %.3fx", floorOf(without.ready), floorOf(without.started))})
	for _, m := range []struct {
		what     string
		a, b     []time.Duration
		p50, p95 float64 // targets
	}{
		{"create→Ready", without.ready, with.ready, floorOf(without.ready) + kubeletMargin, 1.10},
		{"create→Started event", without.started, with.started, floorOf(without.started) + kubeletMargin, 1.10},
		{"create→Pulled event (sandbox up)", without.sandbox, with.sandbox, 0, 0},
	} {
		p50a, p50b, p95a, p95b := pct(m.a, 50), pct(m.b, 50), pct(m.a, 95), pct(m.b, 95)
		_, added := paired(m.a, m.b)
		rep.add(Row{Section: s, Metric: fmt.Sprintf("%s p50, %d pods opted out", m.what, len(m.a)), Value: p50a, Unit: "ms",
			Note: fmt.Sprintf("p95 %.0f ms", p95a)})
		rep.add(Row{Section: s, Metric: fmt.Sprintf("%s p50, %d pods with net1", m.what, len(m.b)), Value: p50b, Unit: "ms",
			Note: fmt.Sprintf("p95 %.0f ms; added per pod (paired median) %.1f ms", p95b, added)})
		if m.p50 > 0 {
			rep.check(s, m.what+" ratio of p50s", p50b/p50a, "x", m.p50, fmt.Sprintf("<= floor %.3fx + %.2f", m.p50-kubeletMargin, kubeletMargin))
			rep.check(s, m.what+" ratio of p95s", p95b/p95a, "x", m.p95, fmt.Sprintf("<= %.2fx", m.p95))
		} else {
			rep.add(Row{Section: s, Metric: m.what + " ratio of p50s", Value: p50b / p50a, Unit: "x",
				Note: fmt.Sprintf("p95s %.2fx", p95b/p95a)})
		}
	}
	if len(attach) > 0 {
		rep.add(Row{Section: s, Metric: "nri-cni attach (its log), p50", Value: pct(attach, 50), Unit: "ms",
			Note: fmt.Sprintf("p95 %.1f ms, %d attaches", pct(attach, 95), len(attach))})
	}
	cp := rss["kube-apiserver"] + rss["etcd"] + rss["kube-controller-manager"] + rss["kube-scheduler"]
	pods := fmt.Sprintf("%d pods running", 2*n+3)
	rep.add(Row{Section: s, Metric: "RSS control plane (apiserver+etcd+ctrl-mgr+sched)", Value: mib(cp), Unit: "MiB", Note: pods})
	rep.add(Row{Section: s, Metric: "RSS kubelet", Value: mib(rss["kubelet"]), Unit: "MiB", Note: pods})
	rep.add(Row{Section: s, Metric: "RSS containerd", Value: mib(rss["containerd"]), Unit: "MiB", Note: pods})
	rep.add(Row{Section: s, Metric: "RSS nri-cni (DaemonSet pod)", Value: mib(nriRSS), Unit: "MiB",
		Note: fmt.Sprintf("%d with net1", n+1)})
	rep.add(Row{Section: s, Metric: "load average (1 min) at start", Value: load0, Unit: "",
		Note: fmt.Sprintf("at end %.2f; %d cores", loadAvg(), numCPU())})
	return nil
}

// timings are one pod's latencies from the create call.
type timings struct{ ready, sandbox, started time.Duration }

type timings3 struct{ ready, sandbox, started []time.Duration }

func (t *timings3) add(x timings) {
	t.ready, t.sandbox, t.started = append(t.ready, x.ready), append(t.sandbox, x.sandbox), append(t.started, x.started)
}

func benchPod(name string, annotated bool, network string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: "yes"}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if annotated {
		p.Annotations = map[string]string{k8sdeploy.Annotation: network}
	}
	return p
}

// checkNet1 checks, after the measurement, that every annotated bench pod
// has net1 and no other has, and that the network holds wantIPs addresses.
func checkNet1(ctx context.Context, c *cluster.Cluster, sec harness.Secondary, pods, wantIPs int) error {
	cri, err := harness.DialCRI(ctx, c.Containerd.Address)
	if err != nil {
		return err
	}
	defer cri.Close()
	list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: benchLabel})
	if err != nil {
		return fmt.Errorf("listing bench pods: %w", err)
	}
	if len(list.Items) != pods {
		return fmt.Errorf("%d bench pods, want %d", len(list.Items), pods)
	}
	for _, p := range list.Items {
		netns, err := k8sdeploy.SandboxNetns(ctx, cri, string(p.UID))
		if err != nil {
			return err
		}
		_, has, err := harness.PodIface(netns, "net1")
		if err != nil {
			return err
		}
		if want := p.Annotations[k8sdeploy.Annotation] != ""; has != want {
			return fmt.Errorf("pod %s: net1 present %t, want %t", p.Name, has, want)
		}
	}
	if got := len(sec.IPFiles()); got != wantIPs {
		return fmt.Errorf("network %s holds %d addresses, want %d", sec.Name, got, wantIPs)
	}
	return nil
}

// deleteBenchPods deletes the bench pods, waits until they are gone and
// nri-cni has released their addresses.
func deleteBenchPods(ctx context.Context, c *cluster.Cluster, o *k8sdeploy.Overlay) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := c.Kubectl(ctx, "delete", "pods", "-l", benchLabel, "--ignore-not-found", "--wait=true", "--timeout=4m"); err != nil {
		return err
	}
	for {
		left := o.Secondary().IPFiles()
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("secondary IPs not released: %v", left)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var attachedRe = regexp.MustCompile(`duration=(\S+)`)

// attachDurations are the durations of nri-cni's "attached" log lines.
func attachDurations(log string) []time.Duration {
	var out []time.Duration
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "msg=attached ") {
			continue
		}
		if m := attachedRe.FindStringSubmatch(l); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

func mib(kib int) float64 { return float64(kib) / 1024 }

func loadAvg() float64 {
	var l float64
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		_, _ = fmt.Sscanf(string(data), "%f", &l)
	}
	return l
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kubeletMargin is what nri-cni may add to a pod's create→Ready (and
// Started) p50 above the floor, as a ratio to a pod without networks.
const kubeletMargin = 0.05

// bridgeADDp50 times n ADDs of a bridge + host-local network through
// libcni alone in a netns of its own (each DELed after), p50 in ms.
func bridgeADDp50(ctx context.Context, e *env, n int) (float64, error) {
	bridge := harness.RandomName("ncbk")
	c, err := newChain(ctx, e, "k8s-floor", bridgeConf("k8sfloor", bridge, harness.RandomSubnet(242), filepath.Join(e.dir, "ipam-k8s-floor")), bridge)
	if err != nil {
		return 0, err
	}
	defer c.close()
	var adds []time.Duration
	for i := 0; i < n; i++ {
		d, err := c.rawAdd(ctx, fmt.Sprintf("k8sfloor%05d", i))
		if err != nil {
			return 0, err
		}
		adds = append(adds, d)
	}
	return pct(adds, 50), nil
}
