package mnp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nri-cni/nri-cni/attach"
)

// fakeApplier answers ApplyPolicy from a script per sandbox (nil when the
// script ran out) and records the calls.
type fakeApplier struct {
	mu          sync.Mutex
	calls       []string
	script      map[string][]error
	quarantined []string
	listed      []string // PolicySandboxes
}

func (f *fakeApplier) ApplyPolicy(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, id)
	if s := f.script[id]; len(s) > 0 {
		f.script[id] = s[1:]
		return s[0]
	}
	return nil
}

func (f *fakeApplier) Quarantine(_ context.Context, id string) error {
	f.mu.Lock()
	f.quarantined = append(f.quarantined, id)
	f.mu.Unlock()
	return nil
}

func (f *fakeApplier) PolicySandboxes() []string { return f.listed }

type fakeObserver struct {
	mu           sync.Mutex
	propagations int
	depth        int
	invalid      int
	dropped      int
}

func (o *fakeObserver) ObserveMNPPropagation(time.Duration) {
	o.mu.Lock()
	o.propagations++
	o.mu.Unlock()
}
func (o *fakeObserver) SetMNPQueueDepth(n int)      { o.mu.Lock(); o.depth = n; o.mu.Unlock() }
func (o *fakeObserver) SetMNPInvalidPolicies(n int) { o.mu.Lock(); o.invalid = n; o.mu.Unlock() }
func (o *fakeObserver) MNPEventDropped()            { o.mu.Lock(); o.dropped++; o.mu.Unlock() }

func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// testQueue: no propagation delay and no waits between tries, so next()
// is driven one take at a time.
func testQueue(f *fakeApplier, o *fakeObserver, delay time.Duration, clk clock.WithTicker) *dirtyQueue {
	d := newDirtyQueue(f, f, o, quietLog(), delay, time.Second, 1, func(string) bool { return true }, clk)
	d.retries = make([]time.Duration, len(retries))
	return d
}

// Marks of one sandbox within the propagation delay of the first are one
// apply, taken when the first mark's delay has passed (a fake clock).
func TestQueueCoalesces(t *testing.T) {
	f := &fakeApplier{}
	o := &fakeObserver{}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	d := testQueue(f, o, 100*time.Millisecond, clk)
	defer d.q.ShutDown()
	d.mark(map[string]string{"a": "ns1"})
	clk.Step(50 * time.Millisecond)
	d.mark(map[string]string{"a": "ns1"})
	d.mark(map[string]string{"a": "ns1"})
	if n := d.q.Len(); n != 0 {
		t.Fatalf("%d ready before the delay passed", n)
	}
	clk.Step(50 * time.Millisecond) // a's first mark is due
	d.mark(map[string]string{"b": "ns1"})
	clk.Step(100 * time.Millisecond) // b due; a's later marks would be too
	ctx := context.Background()
	d.next(ctx)
	d.next(ctx)
	if fmt.Sprint(f.calls) != "[a b]" {
		t.Errorf("calls %v, want [a b]: three marks within the delay are one apply", f.calls)
	}
	if o.propagations != 2 {
		t.Errorf("%d propagations observed, want 2", o.propagations)
	}
}

func TestQueueRoundRobin(t *testing.T) {
	f := &fakeApplier{}
	d := testQueue(f, &fakeObserver{}, 0, nil)
	defer d.q.ShutDown()
	for _, id := range []string{"a1", "a2", "a3"} {
		d.mark(map[string]string{id: "busy-tenant"})
	}
	d.mark(map[string]string{"b1": "quiet"})
	d.mark(map[string]string{"c1": "other"})
	for range 5 {
		d.next(context.Background())
	}
	if want := "[a1 b1 c1 a2 a3]"; fmt.Sprint(f.calls) != want {
		t.Errorf("order %v, want %v: namespaces in turn", f.calls, want)
	}
}

func TestQueueRetriesThenQuarantines(t *testing.T) {
	boom := errors.New("netlink: no buffer space")
	busy := fmt.Errorf("sandbox s: %w", attach.ErrBusy)
	cases := []struct {
		name        string
		script      []error
		takes       int
		quarantined int
		fails       int // left counted after the takes
	}{
		{"success", nil, 1, 0, 0},
		{"busy is not a try", []error{busy, busy, busy, busy, busy, busy, busy}, 8, 0, 0},
		{"five failures: retried, no quarantine", []error{boom, boom, boom, boom, boom}, 5, 0, 5},
		{"six failures: quarantined once", []error{boom, boom, boom, boom, boom, boom, boom}, 7, 1, 7},
		{"success after failures resets", []error{boom, boom, nil}, 3, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeApplier{script: map[string][]error{"s": c.script}}
			d := testQueue(f, &fakeObserver{}, 0, nil)
			defer d.q.ShutDown()
			d.mark(map[string]string{"s": "ns"})
			for range c.takes {
				d.next(context.Background())
			}
			if len(f.quarantined) != c.quarantined {
				t.Errorf("quarantined %d times, want %d", len(f.quarantined), c.quarantined)
			}
			if n := d.fails["ns/s"]; n != c.fails {
				t.Errorf("%d failed tries counted, want %d", n, c.fails)
			}
		})
	}
}

func TestQueueRetryWaits(t *testing.T) {
	want := "[1s 2s 4s 8s 16s]"
	if fmt.Sprint(retries) != want {
		t.Errorf("retries %v, want %v (design §4.7)", retries, want)
	}
}

func TestQueueDropsSandboxesGone(t *testing.T) {
	f := &fakeApplier{}
	d := newDirtyQueue(f, f, nil, quietLog(), 0, time.Second, 1, func(id string) bool { return id != "gone" }, nil)
	defer d.q.ShutDown()
	d.mark(map[string]string{"gone": "ns"})
	d.next(context.Background())
	if len(f.calls) != 0 {
		t.Errorf("applied %v for a sandbox no longer local", f.calls)
	}
}

// attach.Manager is the applier, the quarantiner and the lister.
var (
	_ PolicyApplier = (*attach.Manager)(nil)
	_ Quarantiner   = (*attach.Manager)(nil)
	_ SandboxLister = (*attach.Manager)(nil)
)

// After the sync, the applier's own list is taken too (records from
// before a restart), each once.
func TestMarkAllTakesTheApplierList(t *testing.T) {
	f := &fakeApplier{listed: []string{"old1", "sx1"}}
	m := New(nil, nil, Options{Node: node, Applier: f, Quarantiner: f, PropagationDelay: time.Nanosecond})
	m.SetLocal("sx1", LocalPod{"x", "p", "u"}, nil)
	m.markAll()
	for range 2 {
		m.queue.next(context.Background())
	}
	got := fmt.Sprint(f.calls)
	if got != "[old1 sx1]" && got != "[sx1 old1]" {
		t.Errorf("applied %v, want old1 and sx1 once each", got)
	}
}
