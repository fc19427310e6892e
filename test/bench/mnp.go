package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/kube/mnp"
	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol"
	"github.com/nri-cni/nri-cni/nft"
	"github.com/nri-cni/nri-cni/test/harness"
)

// benchMNP: MultiNetworkPolicy (design-42 §4.12). rounds: attaches per arm
// of row 1; reps: policy changes of row 2.
func benchMNP(ctx context.Context, e *env, rep *report, rounds, reps int) error {
	fw, err := nft.New()
	if err != nil {
		return err
	}
	if err := mnpAttachRow(ctx, e, rep, fw, rounds); err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	if err := mnpPropagationRow(ctx, e, rep, fw, 100, reps); err != nil {
		return fmt.Errorf("propagation: %w", err)
	}
	return mnpMemoryRow(ctx, rep)
}

// mnpNetwork is the confDir network the bench attaches; policies name it
// bare in policy-for (a node network's identity is its name).
const mnpNetwork = "benchmnp"

// noApplier takes the dirty queue's calls and drops them: in row 1 only
// the attach path is timed, not the queue's reprogramming behind it.
type noApplier struct{}

func (noApplier) ApplyPolicy(context.Context, string) error { return nil }
func (noApplier) Quarantine(context.Context, string) error  { return nil }

// mnpAttachRow: Attach with bridge + host-local into a fresh netns per pod,
// three arms per round in rotating order: (a) MultiNetworkPolicy off, (b)
// on with no policy in the pod's namespace, (c) on with 50 policies
// selecting the pod, 300 peer pods and 10 db pods on the network.
func mnpAttachRow(ctx context.Context, e *env, rep *report, fw *nft.Programmer, rounds int) error {
	w := &world{}
	w.namespace("bench", nil)
	w.namespace("bench-free", nil)
	w.peerWorld("bench", mnpNetwork, 10, 300)
	for i := range 50 {
		w.policies = append(w.policies, benchPolicy("bench", fmt.Sprint("p-", i), mnpNetwork, map[string]string{"app": "server"}, i))
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, _, err := w.start(wctx, mnp.Options{Applier: noApplier{}, Quarantiner: noApplier{}})
	if err != nil {
		return err
	}
	opts, err := netpol.OptionsFromConfig(nil)
	if err != nil {
		return err
	}
	src := &timedSource{Source: m.Source(opts)}
	tfw := &timedFirewall{Programmer: fw}
	arms := make([]*chain, 2) // off, on
	for i, with := range []func(*attach.Deps){nil, func(d *attach.Deps) { d.Policy, d.Firewall = src, tfw }} {
		bridge := harness.RandomName("ncbm")
		conf := bridgeConf(mnpNetwork, bridge, harness.RandomSubnet(230), filepath.Join(e.dir, fmt.Sprint("ipam-mnp", i)))
		var ws []func(*attach.Deps)
		if with != nil {
			ws = append(ws, with)
		}
		c, err := newChain(ctx, e, fmt.Sprint("mnp", i), conf, bridge, ws...)
		if err != nil {
			return err
		}
		defer c.close()
		arms[i] = c
	}
	type arm struct {
		c         *chain
		namespace string
		wantTable bool
		took      []time.Duration
	}
	all := []*arm{{c: arms[0], namespace: "bench"}, {c: arms[1], namespace: "bench-free"}, {c: arms[1], namespace: "bench", wantTable: true}}
	resolver, err := netns.NewResolver()
	if err != nil {
		return err
	}
	for r := range rounds {
		for k := range all {
			idx := (r + k) % len(all)
			a := all[idx]
			id := fmt.Sprintf("mnp%c%05d", 'a'+rune(idx), r)
			took, err := mnpAttachOnce(ctx, a.c, resolver, fw, id, a.namespace, a.wantTable && r == 0)
			if err != nil {
				return fmt.Errorf("arm (%c) round %d: %w", 'a'+rune(idx), r, err)
			}
			a.took = append(a.took, took)
		}
	}
	sec := "mnp"
	for i, name := range []string{"(a) MNP off", "(b) MNP on, no policy selects the pod", "(c) MNP on, 50 policies select the pod"} {
		rep.add(Row{Section: sec, Metric: "attach " + name + " p50", Value: pct(all[i].took, 50), Unit: "ms"})
		rep.add(Row{Section: sec, Metric: "attach " + name + " p99", Value: pct(all[i].took, 99), Unit: "ms"})
	}
	rep.add(Row{Section: sec, Metric: "attach (b)/(a) ratio of p50s", Value: pct(all[1].took, 50) / pct(all[0].took, 50), Unit: "x"})
	rep.check(sec, "attach (c)/(a) ratio of p50s (50 policies vs none)", pct(all[2].took, 50)/pct(all[0].took, 50), "x", 1.10, "<= 1.10x")
	_, delta := paired(all[0].took, all[2].took)
	rep.add(Row{Section: sec, Metric: "attach (c)-(a) added per pod (paired median)", Value: delta, Unit: "ms",
		Note: "render + the closed table before the ADDs (the full rules are programmed beside them)"})
	rules, addrs := rulesetSize(src.last)
	rep.add(Row{Section: sec, Metric: "attach (c) render p50", Value: pct(src.renders["bench"], 50), Unit: "ms",
		Note: fmt.Sprintf("%d renders; the ruleset: %d rules, %d addresses", len(src.renders["bench"]), rules, addrs)})
	rep.add(Row{Section: sec, Metric: "attach (c) nft Apply of the closed table p50", Value: pct(tfw.closed, 50), Unit: "ms",
		Note: fmt.Sprintf("%d applies (one per attach, before the ADDs: the attach waits for it)", len(tfw.closed))})
	rep.add(Row{Section: sec, Metric: "attach (c) nft Apply of the full rules p50", Value: pct(tfw.applies, 50), Unit: "ms",
		Note: fmt.Sprintf("%d applies (one per attach, beside the ADDs)", len(tfw.applies))})
	return nil
}

// mnpAttachOnce times one Attach of a pod (app=server in namespace) into a
// fresh netns, then detaches it and removes the netns. check: the table
// must be there after the attach (the arm measures what it claims to).
func mnpAttachOnce(ctx context.Context, c *chain, r *netns.Resolver, fw *nft.Programmer, id, namespace string, check bool) (time.Duration, error) {
	pod, err := testutils.NewNS()
	if err != nil {
		return 0, err
	}
	defer func() {
		_ = pod.Close()
		_ = testutils.UnmountNS(pod)
	}()
	sb := attach.Sandbox{ID: id, Kind: "pod", Pinned: pod.Path(), Labels: map[string]string{"app": "server"},
		Pod: cni.PodIdentity{Namespace: namespace, Name: "pod-" + id, UID: "uid-" + id, InfraID: id}}
	start := time.Now()
	if _, err := c.mgr.Attach(ctx, sb); err != nil {
		return 0, err
	}
	took := time.Since(start)
	if check {
		if err := hasTable(ctx, r, fw, pod); err != nil {
			return 0, err
		}
	}
	return took, c.mgr.Detach(ctx, sb, true)
}

func hasTable(ctx context.Context, r *netns.Resolver, fw *nft.Programmer, pod ns.NetNS) error {
	n, err := r.Check(pod.Path())
	if err != nil {
		return err
	}
	d, err := fw.Digest(ctx, n)
	if err != nil {
		return err
	}
	if d == "" {
		return fmt.Errorf("no table in %s after the attach: the policies did not select the pod", pod.Path())
	}
	return nil
}

// watchApplier is the dirty queue's applier: the real Manager, and after
// each ApplyPolicy, while a change is being timed, the pod's table digest
// read back from its netns; done gets the time the last pod's changed.
type watchApplier struct {
	mgr  atomic.Pointer[attach.Manager] // set once the Manager is built
	fw   *nft.Programmer
	nsOf map[string]netns.Netns

	mu     sync.Mutex
	before map[string]string // digests before the change; nil: not timing
	now    map[string]string
	done   chan time.Time
	depth  int
	// props: the queue's own mark → applied times while observing (from
	// a change until the next one's settling).
	props     []time.Duration
	observing bool
}

func (a *watchApplier) ApplyPolicy(ctx context.Context, id string) error {
	mgr := a.mgr.Load()
	if mgr == nil {
		return nil // nothing attached yet
	}
	err := mgr.ApplyPolicy(ctx, id)
	a.mu.Lock()
	timing := a.before != nil
	a.mu.Unlock()
	if !timing {
		return err
	}
	d, derr := a.fw.Digest(ctx, a.nsOf[id])
	a.mu.Lock()
	defer a.mu.Unlock()
	if derr == nil && a.before != nil {
		a.now[id] = d
		if allChanged(a.before, a.now) {
			a.before = nil
			a.done <- time.Now()
		}
	}
	return err
}

func (a *watchApplier) Quarantine(ctx context.Context, id string) error {
	if mgr := a.mgr.Load(); mgr != nil {
		return mgr.Quarantine(ctx, id)
	}
	return nil
}

func (a *watchApplier) PolicySandboxes() []string {
	if mgr := a.mgr.Load(); mgr != nil {
		return mgr.PolicySandboxes()
	}
	return nil
}

// The Observer side: the queue's depth, to wait for quiet.
func (a *watchApplier) ObserveMNPPropagation(d time.Duration) {
	a.mu.Lock()
	if a.observing {
		a.props = append(a.props, d)
	}
	a.mu.Unlock()
}
func (a *watchApplier) SetMNPQueueDepth(n int) {
	a.mu.Lock()
	a.depth = n
	a.mu.Unlock()
}
func (a *watchApplier) SetMNPInvalidPolicies(int) {}
func (a *watchApplier) MNPEventDropped()          {}

// digests reads every pod's table digest.
func (a *watchApplier) digests(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for id, n := range a.nsOf {
		d, err := a.fw.Digest(ctx, n)
		if err != nil {
			return nil, err
		}
		out[id] = d
	}
	return out, nil
}

// settle waits until the queue is empty and every pod has a table.
func (a *watchApplier) settle(ctx context.Context) (map[string]string, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
		a.mu.Lock()
		depth := a.depth
		a.mu.Unlock()
		if depth > 0 {
			continue
		}
		ds, err := a.digests(ctx)
		if err != nil {
			return nil, err
		}
		ok := true
		for _, d := range ds {
			ok = ok && d != ""
		}
		if ok {
			return ds, nil
		}
	}
	return nil, fmt.Errorf("the pods' tables never settled")
}

// mnpPropagationRow: pods local pods attached (cni-recorder, a no-op plugin:
// the row is about rules, not links) with kube/mnp and the real Manager as
// its applier; one policy selecting all of them changes reps times; timed
// from the watch event to the last pod's table read back with a new digest.
func mnpPropagationRow(ctx context.Context, e *env, rep *report, fw *nft.Programmer, pods, reps int) error {
	w := &world{}
	w.namespace("fleet", nil)
	w.peerWorld("fleet", mnpNetwork, 10, 300)
	labels := map[string]string{"app": "web"}
	for i := range pods {
		w.pod(mnpPod("fleet", fmt.Sprint("web-", i), fmt.Sprint("uid-web-", i), mnpNode, labels, "", ""))
	}
	policy := benchPolicy("fleet", "all-web", mnpNetwork, labels, 0)
	w.policies = append(w.policies, policy)
	app := &watchApplier{fw: fw, nsOf: map[string]netns.Netns{}, done: make(chan time.Time, 1)}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, pc, err := w.start(wctx, mnp.Options{Applier: app, Quarantiner: app, Observer: app})
	if err != nil {
		return err
	}
	opts, err := netpol.OptionsFromConfig(nil)
	if err != nil {
		return err
	}
	src := m.Source(opts)
	conf := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"cni-recorder","ip":"10.99.0.5/24"}]}`, mnpNetwork))
	c, err := newChain(ctx, e, "mnpfleet", conf, "", func(d *attach.Deps) { d.Policy, d.Firewall = src, fw })
	if err != nil {
		return err
	}
	defer c.close()
	app.mgr.Store(c.mgr)
	resolver, err := netns.NewResolver()
	if err != nil {
		return err
	}
	var sbs []attach.Sandbox
	var nss []ns.NetNS
	defer func() { // detach first, then remove the namespaces
		for _, sb := range sbs {
			_ = c.mgr.Detach(context.WithoutCancel(ctx), sb, true)
		}
		for _, pod := range nss {
			_ = pod.Close()
			_ = testutils.UnmountNS(pod)
		}
	}()
	for i := range pods {
		pod, err := testutils.NewNS()
		if err != nil {
			return err
		}
		nss = append(nss, pod)
		id := fmt.Sprintf("mnpfleet%03d", i)
		sb := attach.Sandbox{ID: id, Kind: "pod", Pinned: pod.Path(), Labels: labels,
			Pod: cni.PodIdentity{Namespace: "fleet", Name: fmt.Sprint("web-", i), UID: fmt.Sprint("uid-web-", i), InfraID: id}}
		if _, err := c.mgr.Attach(ctx, sb); err != nil {
			return err
		}
		sbs = append(sbs, sb)
		if app.nsOf[id], err = resolver.Check(pod.Path()); err != nil {
			return err
		}
	}
	var took []time.Duration
	var cpu []float64
	for r := range reps {
		before, err := app.settle(ctx)
		if err != nil {
			return err
		}
		app.mu.Lock()
		app.observing = false
		app.mu.Unlock()
		policy.Generation++
		policy.ResourceVersion = fmt.Sprint(policy.Generation)
		policy.Spec.Ingress[0].Ports[0].Port = ptr(intstr.FromInt32(int32(1000 + r)))
		app.mu.Lock()
		app.before, app.now, app.observing = before, map[string]string{}, true
		app.mu.Unlock()
		cpu0 := processCPU()
		start := time.Now()
		pc.W.Modify(policy.DeepCopy())
		select {
		case end := <-app.done:
			took = append(took, end.Sub(start))
			cpu = append(cpu, processCPU()-cpu0)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("change %d: not every pod's table changed within 30 s", r)
		case <-ctx.Done():
			return ctx.Err()
		}
		now, err := app.digests(ctx)
		if err != nil {
			return err
		}
		if !allChanged(before, now) {
			return fmt.Errorf("change %d: a pod's table went back", r)
		}
	}
	sec := "mnp"
	rep.check(sec, fmt.Sprintf("policy change over %d pods: last table changed p50", pods), pct(took, 50), "ms", 1000, "<= 1000 ms")
	rep.add(Row{Section: sec, Metric: fmt.Sprintf("policy change over %d pods: last table changed max", pods), Value: pct(took, 100), Unit: "ms",
		Note: fmt.Sprintf("%d changes; includes the %v propagation delay", reps, mnp.DefaultPropagationDelay)})
	app.mu.Lock()
	props := app.props
	app.mu.Unlock()
	rep.add(Row{Section: sec, Metric: "policy change: the queue's propagation p99", Value: pct(props, 99), Unit: "ms",
		Note: fmt.Sprintf("%d sandboxes: marked dirty → rules applied (the metric's)", len(props))})
	rep.add(Row{Section: sec, Metric: fmt.Sprintf("policy change over %d pods: process CPU p50", pods), Value: median(cpu) * 1000, Unit: "ms",
		Note: "user+sys, event to last table"})
	return nil
}

func ptr[T any](v T) *T { return &v }

// processCPU is this process's user+sys CPU time, seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return cpuSeconds(ru.Utime.Sec, int64(ru.Utime.Usec), ru.Stime.Sec, int64(ru.Stime.Usec))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// mnpMemoryRow: kube/mnp's caches holding 1,000 policies (100 namespaces ×
// 10) and 2,000 peer pods: heap in use and RSS after vs before, the API
// objects (the fake clientset's) counted in both.
func mnpMemoryRow(ctx context.Context, rep *report) error {
	w := &world{}
	w.peerWorld("peers-0", mnpNetwork, 100, 2000)
	for k := range 100 {
		ns := fmt.Sprint("peers-", k)
		for i := range 10 {
			w.policies = append(w.policies, benchPolicy(ns, fmt.Sprint("p-", i), mnpNetwork, map[string]string{"role": fmt.Sprint("client-", i)}, k*10+i))
		}
	}
	heap0, rss0 := memNow()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, _, err := w.start(wctx, mnp.Options{Applier: noApplier{}, Quarantiner: noApplier{}})
	if err != nil {
		return err
	}
	if s := m.Snapshot(); len(s.Policies("peers-7")) != 10 || len(s.Peers("peers-7")) != 20 {
		return fmt.Errorf("the cache holds %d policies and %d peers of peers-7, want 10 and 20", len(s.Policies("peers-7")), len(s.Peers("peers-7")))
	}
	heap1, rss1 := memNow()
	runtime.KeepAlive(m)
	runtime.KeepAlive(w)
	sec := "mnp"
	rep.check(sec, "1,000 policies + 2,000 peers: heap in use, delta", float64(heap1-heap0)/(1<<20), "MiB", 40, "<= 40 MiB")
	rep.add(Row{Section: sec, Metric: "1,000 policies + 2,000 peers: RSS, delta", Value: float64(rss1-rss0) / 1024, Unit: "MiB",
		Note: "after debug.FreeOSMemory"})
	return nil
}

// memNow collects garbage, returns freed pages to the OS and reads the heap
// in use (bytes) and the RSS (KiB).
func memNow() (heap uint64, rssK int) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r, _ := readRSS(os.Getpid())
	return ms.HeapInuse, r.total
}
