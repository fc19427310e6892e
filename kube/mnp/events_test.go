package mnp

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/nri-cni/nri-cni/netpol"
)

func TestEventsOncePerGenerationAndRateLimited(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	o := &fakeObserver{}
	r := newReporter(node, rec, o)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	r.at = now
	note := func(reason string) []netpol.Note { return []netpol.Note{{Reason: reason, Message: "m"}} }
	p := &netpol.Policy{Namespace: "n", Name: "p", UID: "u", Generation: 1}

	r.noted(p, note("Invalid"))
	r.noted(p, note("Invalid")) // the same generation and reason: told already
	r.noted(p, note("CapExceeded"))
	if n := len(rec.Events); n != 2 {
		t.Fatalf("%d Events, want 2 (once per generation and reason)", n)
	}
	if o.invalid != 1 {
		t.Errorf("invalid policies %d, want 1", o.invalid)
	}
	p2 := *p
	p2.Generation = 2
	r.policyChanged("n", "p", &p2)
	if o.invalid != 0 {
		t.Errorf("invalid policies %d after a new generation, want 0", o.invalid)
	}
	r.noted(&p2, note("Invalid"))
	if n := len(rec.Events); n != 3 {
		t.Fatalf("%d Events, want 3: a new generation is told again", n)
	}

	// The burst: 10 at once (3 spent), then one per 30 s; the rest dropped.
	for i := range 20 {
		r.noted(&netpol.Policy{Namespace: "n", Name: fmt.Sprint("q", i), Generation: 1}, note("Invalid"))
	}
	if n := len(rec.Events); n != 10 {
		t.Errorf("%d Events, want 10 (the burst)", n)
	}
	if o.dropped != 13 {
		t.Errorf("%d dropped, want 13", o.dropped)
	}
	now = now.Add(30 * time.Second)
	r.noted(&netpol.Policy{Namespace: "n", Name: "q19", Generation: 1}, note("Invalid"))
	r.noted(&netpol.Policy{Namespace: "n", Name: "q18", Generation: 1}, note("Invalid"))
	if n := len(rec.Events); n != 11 {
		t.Errorf("%d Events after 30 s, want 11 (one more)", n)
	}

	r.policyChanged("n", "p", nil)
	r.podGone("x")
	r.notSynced(LocalPod{"n", "pod", "uid-pod"}, "why")
	now = now.Add(time.Hour)
	r.notSynced(LocalPod{"n", "pod", "uid-pod"}, "why")
	if n := len(rec.Events); n != 12 {
		t.Errorf("%d Events, want 12: NotSynced once per pod", n)
	}
}
