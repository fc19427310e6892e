package kube

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/plan"
)

// fairShare, as data: max-min among namespaces, NADs of a namespace over
// its share kept in name order while they fit.
func TestFairShare(t *testing.T) {
	d := func(ns, name string, size int) nadDemand { return nadDemand{namespace: ns, name: name, size: size} }
	tests := []struct {
		name   string
		nads   []nadDemand
		max    int
		admit  []bool
		shares map[string]*nsShare
	}{
		{name: "within the budget: all", max: 100,
			nads:  []nadDemand{d("a", "1", 40), d("b", "1", 60)},
			admit: []bool{true, true}},
		{name: "one namespace over: the small one keeps all, the big one the rest", max: 100,
			nads:   []nadDemand{d("flood", "3", 30), d("flood", "1", 30), d("small", "1", 20), d("flood", "2", 30), d("flood", "4", 30)},
			admit:  []bool{false, true, true, true, false},
			shares: map[string]*nsShare{"flood": {max: 100, bytes: 120, share: 80, namespaces: 2}}},
		{name: "two over: equal shares", max: 100,
			nads:   []nadDemand{d("a", "1", 40), d("a", "2", 40), d("b", "1", 30), d("b", "2", 30), d("b", "3", 30), d("c", "1", 10)},
			admit:  []bool{true, false, true, false, false, true},
			shares: map[string]*nsShare{"a": {max: 100, bytes: 80, share: 45, namespaces: 3}, "b": {max: 100, bytes: 90, share: 45, namespaces: 3}}},
		{name: "a NAD over the share is left out, later smaller ones kept", max: 60,
			nads:   []nadDemand{d("a", "1", 10), d("a", "2", 50), d("a", "3", 10), d("b", "1", 40)},
			admit:  []bool{true, false, true, false},
			shares: map[string]*nsShare{"a": {max: 60, bytes: 70, share: 30, namespaces: 2}, "b": {max: 60, bytes: 40, share: 30, namespaces: 2}}},
		{name: "equal bytes: both capped the same", max: 50,
			nads:   []nadDemand{d("b", "1", 30), d("a", "1", 30)},
			admit:  []bool{false, false},
			shares: map[string]*nsShare{"a": {max: 50, bytes: 30, share: 25, namespaces: 2}, "b": {max: 50, bytes: 30, share: 25, namespaces: 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			admit, shares := fairShare(tc.nads, tc.max)
			assert.Equal(t, tc.admit, admit)
			assert.Equal(t, tc.shares, shares)
		})
	}
}

// The guarantee docs/security.md states, on random clusters: what is kept
// fits the budget, and a namespace holding no more than the budget divided
// by the namespaces with NADs keeps every NAD, whatever the others hold.
func TestFairShareGuarantee(t *testing.T) {
	r := rand.New(rand.NewSource(41))
	for round := range 500 {
		max := 1000 + r.Intn(100_000)
		var nads []nadDemand
		namespaces := 1 + r.Intn(12)
		for ns := range namespaces {
			for i := range r.Intn(30) {
				size := 1 + r.Intn(5_000)
				if r.Intn(4) == 0 {
					size = 1 + r.Intn(50_000) // a flood
				}
				nads = append(nads, nadDemand{namespace: fmt.Sprint("ns", ns), name: fmt.Sprint("n", i), size: size})
			}
		}
		admit, _ := fairShare(nads, max)
		held, bytes, kept, all := 0, map[string]int{}, map[string]int{}, map[string]int{}
		for i, n := range nads {
			bytes[n.namespace] += n.size
			all[n.namespace]++
			if admit[i] {
				held += n.size
				kept[n.namespace]++
			}
		}
		require.LessOrEqual(t, held, max, "round %d", round)
		for ns, b := range bytes {
			if b <= max/len(bytes) {
				require.Equal(t, all[ns], kept[ns], "round %d: namespace %s holds %d of %d, within an equal share", round, ns, b, max)
			}
		}
	}
}

// nadBudget, driven as the informer does: a later namespace's NADs take
// their share from the namespace holding the most; deleting frees the
// budget and the dropped NADs are to be read back (refetch); a version
// read back fills only the version waited for.
func TestNADBudget(t *testing.T) {
	cell := func(ns, name, rv string, size int) *nadCell {
		return &nadCell{namespace: ns, name: name, resourceVersion: rv, size: size, content: &nadContent{config: "x"}}
	}
	b := newNADBudget(100)
	for i := range 4 {
		b.put(cell("flood", fmt.Sprint("n", i), "1", 25))
	}
	assert.Empty(t, b.kick, "within the budget: nothing to settle")
	b.put(cell("flood", "n4", "1", 25))
	assert.Len(t, b.kick, 1, "over the budget: the settler is woken")
	<-b.kick
	ch := b.settle()
	assert.Equal(t, []string{"flood/n4"}, keys(ch.dropped), "the last by name")

	b.put(cell("victim", "v", "1", 30))
	ch = b.settle()
	assert.Equal(t, []string{"flood/n2", "flood/n3"}, keys(ch.dropped), "the victim's NAD takes its share from the flood")
	assert.Equal(t, 3, ch.out)
	assert.Equal(t, cellHeld, b.cells["victim/v"].state)
	assert.Nil(t, b.cells["flood/n2"].content, "a dropped NAD's content is let go")
	assert.Contains(t, b.cells["flood/n2"].over.why("flood"), "kubernetes.maxNADCacheBytes (100 bytes) is used up, and namespace flood's NADs count 125 bytes, more than its share of 70")
	assert.Same(t, b.cells["flood/n2"].over, b.cells["flood/n3"].over, "one note per namespace")
	assert.LessOrEqual(t, heldBytes(b), 100)

	b.put(cell("flood", "n0", "2", 25)) // an update to the same size: nothing moves
	ch = b.settle()
	assert.Empty(t, ch.dropped)
	assert.Empty(t, ch.refetch)

	b.remove("victim/v")
	ch = b.settle()
	assert.Equal(t, []string{"flood/n2", "flood/n3"}, ch.refetch, "back within the share: read back, in name order")
	assert.Equal(t, cellRefetching, b.cells["flood/n2"].state)
	v, ok := b.refetching("flood/n2")
	require.True(t, ok)
	assert.Equal(t, "1", v)
	assert.False(t, b.fill("flood/n2", "0", &nadContent{}), "another version fills nothing")
	assert.True(t, b.fill("flood/n2", "1", &nadContent{config: "x"}))
	assert.Equal(t, cellHeld, b.cells["flood/n2"].state)
	_, ok = b.refetching("flood/n2")
	assert.False(t, ok)
	assert.Equal(t, 2, b.dropped(), "n3 being read back, n4 dropped")

	b.put(cell("flood", "n3", "5", 25)) // a new version while being read back: the informer brought its content
	assert.Equal(t, cellHeld, b.cells["flood/n3"].state)
	assert.False(t, b.fill("flood/n3", "1", &nadContent{}))
	b.remove("flood/n0")
	ch = b.settle()
	assert.Equal(t, []string{"flood/n4"}, ch.refetch)
	assert.Equal(t, 1, b.dropped(), "flood/n4 waits")
	assert.True(t, b.fill("flood/n4", "1", &nadContent{}))
	assert.Equal(t, 0, b.dropped())
	b.remove("gone/x")
	assert.Empty(t, b.settle().refetch, "an unknown NAD changes nothing")
}

func keys(cells []*nadCell) []string {
	var out []string
	for _, c := range cells {
		out = append(out, c.key())
	}
	return out
}

// heldBytes is what the budget's held cells count.
func heldBytes(b *nadBudget) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.cells {
		if c.state == cellHeld {
			n += c.size
		}
	}
	return n
}

// droppedGauge records what the source reports (metrics.Metrics in the
// binary).
type droppedGauge struct {
	mu sync.Mutex
	n  int
}

func (g *droppedGauge) SetNADCacheDropped(n int) { g.mu.Lock(); g.n = n; g.mu.Unlock() }
func (g *droppedGauge) get() int                 { g.mu.Lock(); defer g.mu.Unlock(); return g.n }

// paddedNAD is a NAD whose config makes it cost about size bytes.
func paddedNAD(ns, name string, size int) *nadv1.NetworkAttachmentDefinition {
	pad := (size-nadFixedBytes-nadPerObjectBytes)/nadConfigCopies - 70
	return nad(ns, name, `{"cniVersion":"1.0.0","name":"`+name+`","type":"tuning","pad":"`+strings.Repeat("x", pad)+`"}`)
}

// Issue 41 (item 1) through the informer: a namespace's flood of NADs uses
// the budget up; another namespace's NADs created later still work (the
// flood's last ones by name are dropped instead, failing their pods with an
// error naming the NAD, the key and why; counted and reported); once NADs
// are deleted the dropped ones are read back from the API server and work
// again, without changing.
func TestNADSourceBudgetIsFair(t *testing.T) {
	const budget = 60_000
	var objs []*nadv1.NetworkAttachmentDefinition
	for i := range 10 {
		objs = append(objs, paddedNAD("flood", fmt.Sprintf("n%02d", i), 10_000))
	}
	client := newNADFake(t, objs...)
	gauge := &droppedGauge{}
	src := runSourceOpts(t, client, NADSourceOptions{Policy: testPolicy(t), MaxCacheBytes: budget})
	src.SetObserver(gauge)
	changes := make(chan struct{}, 100)
	src.OnChange(func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	})
	works := func(ns, name string) error {
		_, err := src.Network(plan.NADRef{Namespace: ns, Name: name})
		return err
	}
	require.Eventually(t, func() bool { return gauge.get() == 4 }, waitFor, 10*time.Millisecond, "6 of the flood's 10 fit")
	for i := range 6 {
		assert.NoError(t, works("flood", fmt.Sprintf("n%02d", i)))
	}

	ctx := context.Background()
	for _, v := range []string{"v1", "v2"} {
		_, err := client.K8sCniCncfIoV1().NetworkAttachmentDefinitions("victim").Create(ctx, paddedNAD("victim", v, 10_000), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return works("victim", "v2") == nil && gauge.get() == 6 }, waitFor, 10*time.Millisecond,
		"the victim's NADs work; the flood keeps its share (4)")
	require.NoError(t, works("victim", "v1"))
	assert.LessOrEqual(t, heldBytes(src.budget), budget)
	for i := range 10 {
		err := works("flood", fmt.Sprintf("n%02d", i))
		if i < 4 {
			assert.NoError(t, err, "n%02d", i)
			continue
		}
		require.ErrorIs(t, err, ErrNADCacheFull, "n%02d", i)
		for _, want := range []string{fmt.Sprintf("flood/n%02d", i), "kubernetes.maxNADCacheBytes (60000 bytes) is used up",
			"namespace flood's NADs count", "more than its share of", "comes back when NADs are deleted"} {
			assert.Contains(t, err.Error(), want)
		}
	}
	assert.NotEmpty(t, changes, "OnChange told (the DRA driver republishes)")
	entries := src.List()
	require.Len(t, entries, 12)
	assert.ErrorIs(t, entries[9].Err, ErrNADCacheFull, "the DRA driver's list sees it too: %s", entries[9].Ref)

	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" {
				n++
			}
		}
		return n
	}
	before := gets()
	for i := range 6 {
		require.NoError(t, client.K8sCniCncfIoV1().NetworkAttachmentDefinitions("flood").Delete(ctx, fmt.Sprintf("n%02d", i), metav1.DeleteOptions{}))
	}
	require.Eventually(t, func() bool { return gauge.get() == 0 }, waitFor, 10*time.Millisecond, "all fit again")
	for i := 6; i < 10; i++ {
		n, err := src.Network(plan.NADRef{Namespace: "flood", Name: fmt.Sprintf("n%02d", i)})
		require.NoError(t, err, "n%02d read back", i)
		assert.Equal(t, fmt.Sprintf("n%02d", i), n.Name)
	}
	assert.Equal(t, 4, gets()-before, "one GET per NAD read back")
	assert.LessOrEqual(t, heldBytes(src.budget), budget)
}

// BenchmarkNADBudgetSettle: one settling of 10,000 NADs in 50 namespaces,
// over the default budget (the settler runs it at most every settleEvery,
// however many events arrive).
func BenchmarkNADBudgetSettle(b *testing.B) {
	bud := newNADBudget(16 << 20)
	for i := range 10_000 {
		bud.put(&nadCell{namespace: fmt.Sprint("ns", i%50), name: fmt.Sprint("n", i), resourceVersion: "1", size: 5000,
			content: &nadContent{}})
	}
	b.ResetTimer()
	for range b.N {
		bud.settle()
	}
}
