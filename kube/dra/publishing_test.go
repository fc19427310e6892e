package dra

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/nri-cni/nri-cni/config"
)

// countingPublisher records what the driver publishes.
type countingPublisher struct {
	mu    sync.Mutex
	calls int
	last  resourceslice.DriverResources
}

func (p *countingPublisher) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.last = r
	return nil
}

func (p *countingPublisher) Stop() {}

func (p *countingPublisher) state() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.last.Pools["node-1"].Slices {
		n += len(s.Devices)
	}
	return p.calls, n
}

type skipRecorder struct {
	mu    sync.Mutex
	calls int
	last  []Skip
}

func (r *skipRecorder) Unpublished(s []Skip) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.last = s
}

// Item 5: a NAD churn loop (a new NAD every 20 ms, each kicking the
// driver) costs a bounded number of refreshes and publishes, and the last
// state is published once the bucket allows.
func TestChurnIsRateLimited(t *testing.T) {
	d, _, _ := newDriver(t, config.SharingMultiple)
	alpha := d.o.Candidates()[0]
	var nads atomic.Int64
	var refreshes atomic.Int64
	d.o.Candidates = func() []Candidate {
		refreshes.Add(1)
		out := []Candidate{alpha}
		for i := range nads.Load() {
			out = append(out, nad(t, "churn", fmt.Sprintf("n%04d", i)))
		}
		return out
	}
	rep := &skipRecorder{}
	d.o.Reporter = rep
	d.o.Refresh = time.Hour
	d.o.Publishing = PublishLimits{Coalesce: 10 * time.Millisecond, MinRefresh: 100 * time.Millisecond, Burst: 2, Every: 400 * time.Millisecond}
	d.pubs = publishing{} // the limits above, not those of newDriver's refreshes
	pub := &countingPublisher{}
	d.pub = pub
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refreshes.Store(0)
	go d.run(ctx)

	start := time.Now()
	for time.Since(start) < 2*time.Second {
		nads.Add(1)
		d.Kick()
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	calls, _ := pub.state()
	maxPublishes := 2 + int(elapsed/(400*time.Millisecond)) + 1
	t.Logf("%d NAD changes in %s: %d refreshes, %d publishes", nads.Load(), elapsed.Round(time.Millisecond), refreshes.Load(), calls)
	assert.LessOrEqual(t, calls, maxPublishes, "publishes: the bucket's burst, then one per Every")
	assert.LessOrEqual(t, refreshes.Load(), int64(elapsed/(100*time.Millisecond)+elapsed/(400*time.Millisecond))+2,
		"refreshes: kicks at least MinRefresh apart, and one per publish the bucket put off")
	want := int(nads.Load()) + 1
	require.Eventually(t, func() bool { _, n := pub.state(); return n == want }, 5*time.Second, 20*time.Millisecond,
		"the last inventory is published once the bucket has a token")
	rep.mu.Lock()
	assert.Positive(t, rep.calls, "every refresh is reported")
	rep.mu.Unlock()
}

func TestBucket(t *testing.T) {
	b := bucket{burst: 3, every: 10 * time.Second}
	now := time.Unix(0, 0)
	for range 3 {
		assert.Zero(t, b.take(now))
	}
	assert.Equal(t, 10*time.Second, b.take(now), "empty: the next token in 10 s")
	now = now.Add(5 * time.Second)
	assert.Equal(t, 5*time.Second, b.take(now))
	now = now.Add(5 * time.Second)
	assert.Zero(t, b.take(now))
	now = now.Add(time.Hour)
	for range 3 {
		assert.Zero(t, b.take(now), "never more than the burst saved up")
	}
	assert.Positive(t, b.take(now))
}

// A NAD edited to another plugin type keeps its device name but not its
// type attribute: the inventory changed, and is published again.
func TestAttributeChangeIsAChange(t *testing.T) {
	d, _, _ := newDriver(t, config.SharingMultiple)
	typ := "bridge"
	d.o.Candidates = func() []Candidate {
		return []Candidate{{Network: "team/x", Namespace: "team", Net: net(t, "x", fmt.Sprintf(`{"type":%q}`, typ))}}
	}
	require.True(t, d.refresh())
	require.False(t, d.refresh())
	typ = "ipvlan"
	require.True(t, d.refresh(), "the type attribute changed")
	assert.Equal(t, "ipvlan", *d.Published().Devices[0].Attributes[AttrType].StringValue)
}
