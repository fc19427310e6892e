package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
	"github.com/nri-cni/nri-cni/test/k8sdeploy"
)

// benchDensity: node density through the kubelet. On a single-node cluster
// of its own with nri-cni deployed from deploy/base, n pods (the kubelet's
// default limit is 110) are created through the API at once, three kinds in
// turn — no networks, one NPWG network, three — and then all deleted at
// once. Per pod, from its create call to the arrival of its Ready status at
// a watch, and to the arrival of its network-status; nri-cni's RSS sampled
// through the storm; after the deletion, nothing of the pods may be left on
// the node (addresses, records, libcni cache entries).
//
// A storm's times swing by ±10 % from one storm to the next on a shared
// 2-core machine, so the kinds run in rounds (DENSITY_ROUNDS, default 3),
// each round in another order, and the ratio checked is the median over the
// rounds of each round's kind / none.
func benchDensity(ctx context.Context, e *env, rep *report, n, rounds int) (err error) {
	const s = "10 density"
	load0 := loadAvg()
	w, err := startK8sWorld(ctx, e, filepath.Join(e.dir, "density"), nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.close(context.WithoutCancel(ctx))) }()
	nets, err := densityNADs(ctx, w, 3)
	if err != nil {
		return err
	}
	defer func() {
		for _, sec := range nets {
			sec.DeleteBridge()
		}
	}()
	// As deploy/base ships it: the test overlay's hot-plug and 3 s drift
	// checks (CNI CHECK of every attachment) are for the tests.
	edits := []string{"hotplug: true", "hotplug: false", "checkInterval: 3s", "checkInterval: 0s"}
	if os.Getenv("DENSITY_INLINE") != "" {
		// For comparison: the attach inside RunPodSandbox, under the
		// runtime's node-wide NRI lock.
		edits = append(edits, "backgroundAttach: true", "backgroundAttach: false")
	}
	if err := w.setConf(ctx, edits...); err != nil {
		return err
	}
	pid, err := w.d.Pid(ctx)
	if err != nil {
		return err
	}
	kinds := []struct {
		name     string
		networks int
	}{{"none", 0}, {"one", 1}, {"three", 3}}
	// Each round in another order (rotated), so that no kind always runs
	// first or last (the node warms up, a neighbour's load comes and goes).
	var order []int
	for r := range rounds {
		for i := range kinds {
			order = append(order, (i+r)%len(kinds))
		}
	}
	results := map[string]*storm{}
	byRound := map[string][]storm{} // each round's storm of the kind
	spentBy := map[string]map[string]time.Duration{}
	var peak rss
	for i, ki := range order {
		k := kinds[ki]
		annotation := ""
		for j := range k.networks {
			if j > 0 {
				annotation += ", "
			}
			annotation += nets[j].Name
		}
		pids := w.c.Pids()
		pids["nri-cni"] = pid
		cpu := startCPU(pids)
		st, err := runStorm(ctx, w, k.name, fmt.Sprintf("%s-r%d", k.name, i/len(kinds)+1), annotation, n, pid)
		spent := cpu.stop()
		if err != nil {
			return fmt.Errorf("%s storm: %w\nnri-cni's log tail:\n%s", k.name, err, tail(w.d.Log(ctx), 20))
		}
		if err := settle(ctx, w, nets, st.ids); err != nil {
			return fmt.Errorf("%s storm: %w", k.name, err)
		}
		if st.peakRSS.total > peak.total {
			peak = st.peakRSS
		}
		if results[k.name] == nil {
			results[k.name], spentBy[k.name] = &storm{}, map[string]time.Duration{}
		}
		results[k.name].merge(st)
		byRound[k.name] = append(byRound[k.name], st)
		for c, d := range spent {
			spentBy[k.name][c] += d
		}
	}
	for _, k := range kinds {
		st := results[k.name]
		rep.add(Row{Section: s, Metric: fmt.Sprintf("%d pods at once, %s: create→Ready p50", n, k.name), Value: pct(st.ready, 50),
			Unit: "ms", Note: fmt.Sprintf("p99 %.0f ms (%d storms pooled); all Ready in %.1f s, all deleted and released in %.1f s (means)",
				pct(st.ready, 99), rounds, st.allReady.Seconds()/float64(rounds), st.deleted.Seconds()/float64(rounds))})
		// Where the time goes: containerd's RunPodSandbox (its NRI calls
		// are serialised node-wide), nri-cni's own attach, and the CPU each
		// component spent.
		log := w.d.Log(ctx)
		sandbox := runPodSandboxDurations(w.c.Containerd.LogPath, "density-"+k.name+"-")
		handler := handlerDurations(log, "density-"+k.name+"-")
		pending := countLines(log, "pod=density-"+k.name+"-", attach.ErrAttachPending.Error())
		rep.add(Row{Section: s, Metric: fmt.Sprintf("%s: containerd RunPodSandbox p50", k.name), Value: pct(sandbox, 50), Unit: "ms",
			Note: fmt.Sprintf("p99 %.0f ms, %d sandboxes; nri-cni's attach p50 %.1f ms, p99 %.1f ms, sum %.1f s; containers refused as still attaching: %d",
				pct(sandbox, 99), len(sandbox), pct(handler, 50), pct(handler, 99), sum(handler).Seconds(), pending)})
		rep.add(Row{Section: s, Metric: fmt.Sprintf("%s: CPU per pod, the whole machine (create, Ready, delete)", k.name),
			Value: float64(spentBy[k.name]["machine"].Milliseconds()) / float64(rounds*n), Unit: "ms", Note: cpuNote(spentBy[k.name], rounds*n)})
	}
	// densityMargin is what nri-cni may add to the floor of a storm's
	// create→Ready p50 ratio.
	const densityMargin = 0.05
	perPod := func(kind, who string) float64 {
		return float64(spentBy[kind][who].Microseconds()) / 1000 / float64(rounds*n)
	}
	// ratio is the median over the rounds of the kind's percentile p over
	// that round's none's, and the rounds' values.
	ratio := func(kind string, p float64) (float64, string) {
		var rs []float64
		var each []string
		for r := range rounds {
			v := pct(byRound[kind][r].ready, p) / pct(byRound["none"][r].ready, p)
			rs = append(rs, v)
			each = append(each, fmt.Sprintf("%.2f", v))
		}
		sort.Float64s(rs)
		return rs[len(rs)/2], "rounds: " + strings.Join(each, ", ")
	}
	for _, k := range kinds[1:] {
		r := results[k.name]
		// The storm is CPU-bound on a small node: what the networks cost
		// in CPU is what they cost in time. The plugins' CPU (nri-cni's
		// children) is the work asked for; a pod with these networks
		// cannot start faster than "floor" times one without, whoever
		// runs the plugins.
		machine0, machine := perPod("none", "machine"), perPod(k.name, "machine")
		plugins, own := perPod(k.name, "nri-cni (its children)"), perPod(k.name, "nri-cni")
		rep.add(Row{Section: s, Metric: fmt.Sprintf("%s: CPU per pod above none", k.name), Value: machine - machine0, Unit: "ms",
			Note: fmt.Sprintf("of it the CNI plugins %.0f ms, nri-cni itself %.0f ms, the rest %.0f ms (the network-status patch: API server, etcd, and the kubelet's and containerd's work on the pod update); floor (plugins' CPU alone) %.2fx, with the status write %.2fx",
				plugins, own, machine-machine0-plugins-own, (machine0+plugins)/machine0, (machine-own)/machine0)})
		p50, each50 := ratio(k.name, 50)
		p99, each99 := ratio(k.name, 99)
		// The target: the floor (everything the pods' networks cost the
		// machine but nri-cni's own CPU: the plugins, the network-status
		// write) + densityMargin, and never below 1.10.
		floor := (machine - own) / machine0
		limit := max(floor+densityMargin, 1.10)
		rep.checkNote(s, fmt.Sprintf("create→Ready p50, %s / none (median of rounds)", k.name), p50, "x", limit,
			fmt.Sprintf("<= max(floor %.2fx + %.2f, 1.10)", floor, densityMargin), each50)
		rep.checkNote(s, fmt.Sprintf("create→Ready p99, %s / none (median of rounds)", k.name), p99, "x", 1.25, "<= 1.25x", each99)
		rep.check(s, fmt.Sprintf("Ready → network-status visible p99, %s", k.name), pct(r.statusAfterReady, 99), "ms", 2000,
			"<= 2000 ms")
	}
	rep.check(s, "nri-cni peak RSS during the storms", mib(peak.total), "MiB", 40, "<= 40 MiB")
	rep.add(Row{Section: s, Metric: "nri-cni RSS at its peak: anonymous / file", Value: mib(peak.anon), Unit: "MiB",
		Note: fmt.Sprintf("file pages (its own binary, mapped) %.1f MiB", mib(peak.file))})
	rep.check(s, "addresses, records and cache entries left after the deletions", 0, "", 0, "0")
	rep.add(Row{Section: s, Metric: "load average (1 min) at start", Value: load0, Unit: "",
		Note: fmt.Sprintf("at end %.2f; %d cores", loadAvg(), numCPU())})
	return nil
}

// storm is one kind's run.
type storm struct {
	ready            []time.Duration // create call → Ready seen
	statusAfterReady []time.Duration // Ready seen → network-status seen (may be negative)
	allReady         time.Duration   // first create call → last pod Ready
	deleted          time.Duration   // delete call → every pod gone and released
	peakRSS          rss             // nri-cni's, at its peak
	ids              []string        // the pods' sandboxes
}

// merge adds o's samples to st (times summed: divide by the rounds).
func (st *storm) merge(o storm) {
	st.ready = append(st.ready, o.ready...)
	st.statusAfterReady = append(st.statusAfterReady, o.statusAfterReady...)
	st.allReady += o.allReady
	st.deleted += o.deleted
	if o.peakRSS.total > st.peakRSS.total {
		st.peakRSS = o.peakRSS
	}
	st.ids = append(st.ids, o.ids...)
}

// runStorm creates n pods of one kind at once (annotation "" = no networks),
// waits until all are Ready (and have network-status when annotated),
// sampling nri-cni's RSS, then deletes them all at once and waits until
// they are gone.
func runStorm(ctx context.Context, w *k8sWorld, kind, run, annotation string, n int, pid int) (st storm, err error) {
	label := "nri-cni.io/density=" + run
	ready, err := k8sdeploy.WatchReady(ctx, w.c.Client, "default", label)
	if err != nil {
		return st, err
	}
	defer ready.Stop()
	status, err := k8sdeploy.WatchPods(ctx, w.c.Client, "default", label, func(p *corev1.Pod) bool {
		return p.Annotations[statusAnnotation] != ""
	})
	if err != nil {
		return st, err
	}
	defer status.Stop()

	var peak rss // written by the sampler only, read after it ended
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if r, err := readRSS(pid); err == nil && r.total > peak.total {
				peak = r
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { stopSampling(); <-sampled; st.peakRSS = peak }()

	names := make([]string, n)
	created := make([]time.Time, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		names[i] = fmt.Sprintf("density-%s-%03d", run, i)
		p := benchPod(names[i], false, "")
		p.Labels = map[string]string{"nri-cni.io/density": run}
		if annotation != "" {
			p.Annotations = map[string]string{npwgNetworks: annotation}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			created[i] = time.Now()
			if _, err := w.c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("creating pod %s: %w", p.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return st, err
	}
	var last time.Time
	for i, name := range names {
		at, err := ready.Wait(ctx, name, 10*time.Minute)
		if err != nil {
			return st, err
		}
		st.ready = append(st.ready, at.Sub(created[i]))
		last = maxTime(last, at)
		if annotation != "" {
			seen, err := status.Wait(ctx, name, 2*time.Minute)
			if err != nil {
				return st, err
			}
			st.statusAfterReady = append(st.statusAfterReady, seen.Sub(at))
		}
	}
	st.allReady = last.Sub(start)
	if st.ids, err = sandboxIDs(ctx, w.c, label); err != nil {
		return st, err
	}

	t0 := time.Now()
	if err := w.c.Client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: label}); err != nil {
		return st, fmt.Errorf("deleting the %s pods: %w", kind, err)
	}
	for {
		list, err := w.c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: label})
		if err != nil {
			return st, err
		}
		if len(list.Items) == 0 {
			break
		}
		if time.Since(t0) > 10*time.Minute {
			return st, fmt.Errorf("%d %s pods not deleted within 10 minutes", len(list.Items), kind)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st.deleted = time.Since(t0)
	return st, nil
}

// sandboxIDs are the pod sandboxes of the pods matching label, from the
// node runtime's CRI (what nri-cni's records and libcni's cache are keyed
// by).
func sandboxIDs(ctx context.Context, c *cluster.Cluster, label string) ([]string, error) {
	list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: label})
	if err != nil {
		return nil, err
	}
	uids := map[string]bool{}
	for _, p := range list.Items {
		uids[string(p.UID)] = true
	}
	cri, err := harness.DialCRI(ctx, c.Runtime().CRIAddress())
	if err != nil {
		return nil, err
	}
	defer cri.Close()
	sbs, err := cri.ListPods(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, sb := range sbs {
		if uids[sb.Metadata.Uid] {
			ids = append(ids, sb.Id)
		}
	}
	return ids, nil
}

// settle waits until nothing of the sandboxes is left on the node — the
// runtime has removed them, nri-cni's records and libcni's cache entries are
// gone, and the addresses in every network (the example network's and the
// NADs') are released — and then a few seconds more, so the next storm does
// not pay for this one's teardown.
func settle(ctx context.Context, w *k8sWorld, nets []harness.Secondary, ids []string) error {
	cri, err := harness.DialCRI(ctx, w.c.Runtime().CRIAddress())
	if err != nil {
		return err
	}
	defer cri.Close()
	gone := map[string]bool{}
	for _, id := range ids {
		gone[id] = true
	}
	var left []string
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		left = w.d.Overlay.NodeFiles(ids...)
		for _, sec := range nets {
			left = append(left, w.d.Overlay.IPFilesOf(sec.Name, ids...)...)
		}
		sbs, err := cri.ListPods(ctx)
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			if gone[sb.Id] {
				left = append(left, "sandbox "+sb.Id)
			}
		}
		if len(left) == 0 {
			time.Sleep(5 * time.Second)
			return nil
		}
	}
	return fmt.Errorf("%d things of deleted pods left on the node: %v", len(left), left)
}

// densityNADs creates k NADs in namespace default, each a bridge network of
// its own (a bridge and /24 deploy/base's NAD policy allows), and waits
// until they are in nri-cni's cache (published as DRA devices).
func densityNADs(ctx context.Context, w *k8sWorld, k int) ([]harness.Secondary, error) {
	nads, err := nadclient.NewForConfig(w.c.RESTConfig)
	if err != nil {
		return nil, err
	}
	var out []harness.Secondary
	for i := range k {
		sec := harness.Secondary{Name: fmt.Sprintf("density-%d", i), Bridge: k8sdeploy.NADBridge(), Subnet: k8sdeploy.NADSubnet()}
		conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": sec.Name, "plugins": []any{
			map[string]any{"type": "bridge", "bridge": sec.Bridge, "isGateway": false, "ipMasq": false,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": sec.Subnet}}}}}}})
		nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: sec.Name, Namespace: "default"},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: string(conf)}}
		if _, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default").Create(ctx, nad, metav1.CreateOptions{}); err != nil {
			return out, fmt.Errorf("creating NAD %s: %w", sec.Name, err)
		}
		out = append(out, sec)
	}
	// The pods must not race nri-cni's NAD cache (they would fail and be
	// retried by the kubelet): the DRA driver publishes a NAD once the cache
	// has it.
	for _, sec := range out {
		if err := waitPublished(ctx, w.c, "default/"+sec.Name); err != nil {
			return out, err
		}
	}
	return out, nil
}

// waitPublished waits until the node's ResourceSlices of nri-cni.io hold a
// device of network (its network attribute).
func waitPublished(ctx context.Context, c *cluster.Cluster, network string) error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + c.NodeName + ",spec.driver=" + dra.DriverName})
		if err != nil {
			continue
		}
		for _, sl := range l.Items {
			for _, d := range sl.Spec.Devices {
				if a, ok := d.Attributes[dra.AttrNetwork]; ok && a.StringValue != nil && *a.StringValue == network {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("network %s not published by nri-cni's DRA driver within 2 minutes", network)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// runPodSandboxDurations are containerd's RunPodSandbox times (its log's
// start and return lines) of the pods whose names start with prefix.
func runPodSandboxDurations(logPath, prefix string) []time.Duration {
	start := map[string]time.Time{}
	var out []time.Duration
	_ = eachRunPodSandbox(logPath, prefix, func(pod string, t time.Time, returned bool) {
		t0, ok := start[pod]
		switch {
		case returned && ok:
			out = append(out, t.Sub(t0))
			delete(start, pod)
		case !returned && !ok:
			start[pod] = t
		}
	})
	return out
}

// handlerDurations are the durations nri-cni logged for its RunPodSandbox
// handler (attached, or skipped) of the pods whose names start with prefix.
func handlerDurations(log, prefix string) []time.Duration {
	var out []time.Duration
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "event=RunPodSandbox") || !strings.Contains(l, "pod="+prefix) {
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

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// countLines counts the lines of log holding every part.
func countLines(log string, parts ...string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			n++
		}
	}
	return n
}

// densityRounds is DENSITY_ROUNDS, or 3.
func densityRounds() int {
	if r, err := strconv.Atoi(os.Getenv("DENSITY_ROUNDS")); err == nil && r > 0 {
		return r
	}
	return 3
}
