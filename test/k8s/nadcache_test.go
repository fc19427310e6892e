package k8s

// Issue 41 (item 1) on the real API server, measured as the review did:
// every node caches every NAD of the cluster, so tenants' NADs heavy with
// metadata must not grow nri-cni towards the DaemonSet's memory limit.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
)

// The flood, as the review measured it (nri-cni's RSS grew from 35 to 71
// MiB): 60 NADs in three namespaces, each with a 250,000-byte annotation
// (the API server allows 256 KiB of annotations in all) and 3,000 labels,
// about 0.4 MB per object with its managed fields (etcd's limit is 1.5
// MiB).
const (
	floodNADs            = 60
	floodNamespaces      = 3
	floodAnnotationBytes = 250_000
	floodLabels          = 3_000
	// rssGrowthKiB bounds how much nri-cni's RSS may grow, after its
	// garbage collector settled (before the fix: +36 MiB in the review,
	// +48 MiB here). What it keeps of the flood is ~1 KiB a NAD; its RSS
	// can grow more, by the garbage of decoding the flood (~1 MB a NAD,
	// collected, the memory returned to the system slowly): measured -5.1
	// to +7.6 MiB here, so about twice the most. docs/security.md states it.
	rssGrowthKiB = 16 << 10
	// heapGoalGrowth bounds the growth of the Go heap's goal after a
	// collection (go_memstats_next_gc_bytes: about twice the live heap),
	// which has no such lag: what nri-cni keeps, doubled, and what else it
	// did meanwhile (measured +2.7 MiB; before the fix +58.7 MiB).
	heapGoalGrowth = 12 << 20
)

// floodNAD is a NAD as a tenant may write it within the API server's
// limits; its empty spec.config names no network (the confDir has none of
// its name), so the DRA driver publishes nothing of it.
func floodNAD(ns, name, blob string) *nadv1.NetworkAttachmentDefinition {
	labels := make(map[string]string, floodLabels)
	for i := range floodLabels {
		labels[fmt.Sprintf("flood.example/l-%04d", i)] = "v"
	}
	return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
		Annotations: map[string]string{"flood.example/blob": blob}}}
}

// TestNADFloodLeavesNRICNIsMemoryAlone: the flood grows nri-cni's RSS by at
// most rssGrowthKiB, nri-cni is not restarted, pods keep attaching (a pod
// created after the flood gets net1) and the NAD cache's budget dropped
// nothing; a restarted nri-cni lists the whole flood at start and stays
// within the same bound of the first one's RSS.
func TestNADFloodLeavesNRICNIsMemoryAlone(t *testing.T) {
	f := newFixture(t)
	pid, err := f.w.d.Pid(f.ctx)
	require.NoError(t, err)
	before, goalBefore := f.settledMemory(pid)
	t.Logf("nri-cni (pid %d) before the flood: RSS %d KiB, heap goal %.1f MiB", pid, before, goalBefore/(1<<20))

	blob := strings.Repeat("b", floodAnnotationBytes)
	nads := f.nads()
	t0 := time.Now()
	for range floodNamespaces {
		ns := harness.RandomName("nadflood-")
		f.namespace(ns) // its deletion deletes its NADs
		for j := range floodNADs / floodNamespaces {
			_, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions(ns).Create(f.ctx,
				floodNAD(ns, fmt.Sprintf("flood-%02d", j), blob), metav1.CreateOptions{})
			require.NoError(t, err, "NAD %d of namespace %s", j, ns)
		}
	}
	t.Logf("%d NADs of a %d-byte annotation and %d labels created in %s", floodNADs, floodAnnotationBytes, floodLabels,
		since(t0))

	// Created after the flood: nri-cni's watch delivers the NADs in order,
	// so a pod attached through this one means the flood is in its cache.
	probe := f.newNAD("default", harness.RandomName("nadflood-probe-"))
	pod := f.waitReady("default", f.create(f.pod(harness.RandomName("nadflood-pod-"), "default",
		map[string]string{npwgAnnotation: probe.Name})).Name)
	net1 := f.iface(pod, "net1")
	assert.True(t, probe.contains(net1.Addrs[0].String()), "net1 %s in %s", net1.Addrs[0], probe.Subnet)

	now, err := f.w.d.Pid(f.ctx)
	require.NoError(t, err)
	require.Equal(t, pid, now, "nri-cni was not restarted (OOM-killed) by the flood")
	after, goalAfter := f.settledMemory(pid)
	t.Logf("nri-cni after the flood: RSS %d KiB (%+d KiB; bound %d KiB), heap goal %.1f MiB (%+.1f MiB; bound %d MiB)",
		after, after-before, rssGrowthKiB, goalAfter/(1<<20), (goalAfter-goalBefore)/(1<<20), heapGoalGrowth>>20)
	assert.LessOrEqual(t, after-before, rssGrowthKiB, "nri-cni's RSS grew by at most %d KiB", rssGrowthKiB)
	assert.LessOrEqual(t, goalAfter-goalBefore, float64(heapGoalGrowth), "nri-cni's heap goal grew by at most %d bytes", heapGoalGrowth)
	assert.Equal(t, 0.0, f.metric("nri_cni_nad_cache_dropped"), "the flood fits the NAD cache's budget")

	// A restarted nri-cni gets the flood in its first list.
	f.restartNRICNI()
	pid, err = f.w.d.Pid(f.ctx)
	require.NoError(t, err)
	again := f.waitReady("default", f.create(f.pod(harness.RandomName("nadflood-pod-"), "default",
		map[string]string{npwgAnnotation: probe.Name})).Name)
	f.iface(again, "net1")
	restarted, goalRestarted := f.settledMemory(pid)
	t.Logf("restarted nri-cni (pid %d) with the flood in its first list: RSS %d KiB (%+d KiB from the first one's before), "+
		"heap goal %.1f MiB", pid, restarted, restarted-before, goalRestarted/(1<<20))
	assert.LessOrEqual(t, restarted-before, rssGrowthKiB)
	assert.LessOrEqual(t, goalRestarted-goalBefore, float64(heapGoalGrowth))
	assert.Equal(t, 0.0, f.metric("nri_cni_nad_cache_dropped"))
}

// settledMemory is nri-cni's RSS (KiB) and heap goal (bytes) once its heap
// has settled: after two garbage collections that ended after this call
// (the Go runtime forces one at least every two minutes; the first may
// still see what was live during the flood), its RSS sampled every 2 s
// until five samples in a row lie within 512 KiB: the smallest of them.
func (f *fixture) settledMemory(pid int) (rssKiB int, heapGoal float64) {
	f.t.Helper()
	start := float64(time.Now().UnixNano()) / 1e9
	var gcs float64
	f.waitFor("a garbage collection in nri-cni", waitLong, func() (bool, string) {
		return f.metric("go_memstats_last_gc_time_seconds") > start, "none yet"
	})
	gcs = f.metric("go_gc_duration_seconds_count")
	f.waitFor("another garbage collection in nri-cni", waitLong, func() (bool, string) {
		return f.metric("go_gc_duration_seconds_count") > gcs, "none yet"
	})
	var samples []int
	f.waitFor("nri-cni's RSS settled", waitLong, func() (bool, string) {
		samples = append(samples, cluster.RSSKiB(pid))
		heapGoal = f.metric("go_memstats_next_gc_bytes")
		if n := len(samples); n >= 5 {
			last := samples[n-5:]
			if slices.Max(last)-slices.Min(last) <= 512 && slices.Min(last) > 0 {
				return true, ""
			}
		}
		time.Sleep(2 * time.Second)
		return false, fmt.Sprintf("samples %v KiB", samples[max(0, len(samples)-5):])
	})
	return slices.Min(samples[len(samples)-5:]), heapGoal
}

// metric is the value of an unlabelled metric on nri-cni's /metrics (the
// DaemonSet runs on the host network: the overlay's address).
func (f *fixture) metric(name string) float64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.w.o.MetricsAddr+"/metrics", nil)
	require.NoError(f.t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(f.t, err, "%s %q", name, v)
			return x
		}
	}
	require.NoError(f.t, sc.Err())
	f.t.Fatalf("nri-cni's /metrics has no %s", name)
	return 0
}
