package fleet

import (
	"context"
	"fmt"
	"time"

	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NADResult is one change of a NetworkAttachmentDefinition, as the fleet
// saw it.
type NADResult struct {
	Agents int
	// Seconds until every agent's cache had it.
	Seconds float64
	// NADBytes: what the agents received on their NAD watches, in all.
	NADBytes int64
	// Agent: every request the agents made meanwhile (the DRA driver's
	// republishing among them), and the bytes they received.
	Agent Snapshot
	API   APIWindow
}

// resourceSlices is the ResourceSlice resource's name.
const resourceSlices = "resourceslices"

// nadChange makes change (an edit or a new NAD) and waits until every
// agent's cache saw it and, when republish, every agent wrote its
// ResourceSlice again; then settle for the DRA driver's coalescing and
// the writes that follow.
func (f *Fleet) nadChange(ctx context.Context, change func(nadclient.Interface) error, republish bool) (NADResult, error) {
	nc, err := nadclient.NewForConfig(f.c.RESTConfig)
	if err != nil {
		return NADResult{}, fmt.Errorf("NAD client: %w", err)
	}
	agents := f.agents()
	events := make([]int64, len(agents))
	slices := make([]int64, len(agents))
	sliceWrites := func(a *Agent) int64 {
		s := a.Counter.Snapshot().Sum(func(k Key) bool { return k.Resource == resourceSlices && IsWrite(k) })
		return s.Requests
	}
	for i, a := range agents {
		events[i], slices[i] = a.NADEvents.Load(), sliceWrites(a)
	}
	before := f.Counts()
	a0, err := SampleAPI(ctx, f.c)
	if err != nil {
		return NADResult{}, err
	}
	start := time.Now()
	if err := change(nc); err != nil {
		return NADResult{}, err
	}
	if err := waitUntil(ctx, 2*time.Minute, func() bool {
		for i, a := range agents {
			if a.NADEvents.Load() == events[i] {
				return false
			}
		}
		return true
	}, "every agent's NAD cache has the change"); err != nil {
		return NADResult{}, err
	}
	secs := time.Since(start).Seconds()
	if republish {
		if err := waitUntil(ctx, 2*time.Minute, func() bool {
			for i, a := range agents {
				if sliceWrites(a) == slices[i] {
					return false
				}
			}
			return true
		}, "every agent republished its ResourceSlice"); err != nil {
			return NADResult{}, err
		}
	}
	// The DRA driver coalesces kicks for 500 ms, then publishes: let what
	// the change causes finish inside the window.
	time.Sleep(3 * time.Second)
	a1, err := SampleAPI(ctx, f.c)
	if err != nil {
		return NADResult{}, err
	}
	d := f.Counts().Sub(before)
	return NADResult{Agents: len(agents), Seconds: secs, Agent: d, API: Window(a0, a1),
		NADBytes: d.Sum(OfResource("network-attachment-definitions")).Bytes}, nil
}

// EditNAD changes the i-th NAD's config (its MTU): the device list the
// DRA driver publishes stays the same.
func (f *Fleet) EditNAD(ctx context.Context, i, rev int) (NADResult, error) {
	return f.nadChange(ctx, func(nc nadclient.Interface) error {
		nads := nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions(Namespace)
		cur, err := nads.Get(ctx, NADName(i), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("NAD %s: %w", NADName(i), err)
		}
		cur.Spec.Config = NAD(i, rev).Spec.Config
		if _, err := nads.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating NAD %s: %w", NADName(i), err)
		}
		return nil
	}, false)
}

// AddNAD creates the i-th NAD: every node's DRA driver publishes one more
// device.
func (f *Fleet) AddNAD(ctx context.Context, i int) (NADResult, error) {
	return f.nadChange(ctx, func(nc nadclient.Interface) error {
		if _, err := nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions(Namespace).Create(ctx, NAD(i, 0), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating NAD %s: %w", NADName(i), err)
		}
		return nil
	}, true)
}
