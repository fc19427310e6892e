package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
)

// Options shape a Run.
type Options struct {
	// Sizes are the fleet sizes measured, ascending (nodes).
	Sizes []int
	// ChurnPerNode pods go through create → attach → status → delete on
	// every node at each size; StandingPerNode stay running for the
	// restart storm.
	ChurnPerNode, StandingPerNode int
	// NADs in the fleet's namespace.
	NADs int
	// Parallel: nodes started, and nodes churning, at a time.
	Parallel int
	// Idle: how long the API server is watched with the fleet idle.
	Idle time.Duration
	// Multus: also run the Multus pattern at each size.
	Multus bool
	// NADChurn: a NAD churn loop this long at the largest size, NADChurnRate
	// NADs created a second (each also deleting an older one), then
	// NADChurnSettle for what it put off; with NADChurnUnbounded, again with
	// the publishing of before issue 28 (Unbounded). 0: none.
	NADChurn          time.Duration
	NADChurnRate      float64
	NADChurnSettle    time.Duration
	NADChurnUnbounded bool
	// Logf, when set, hears the phases.
	Logf func(format string, args ...any)
}

// SizeResult is the fleet at one size.
type SizeResult struct {
	Nodes int
	// Start: the added agents' requests from start until synced.
	Start      Snapshot
	StartAgent int // how many agents Start counts
	// IdleAPI: the API server with the fleet idle; Watches: the watches
	// the agents hold (their transports' count).
	IdleAPI APIWindow
	Watches int64
	// IdleAgent: the agents' requests in the idle window.
	IdleAgent Snapshot
	// SelfRSSMiB: this process (every agent) after the idle window.
	SelfRSSMiB float64
	Churn      ChurnResult
	NADEdit    NADResult
	// Storm: every agent restarted at once, StandingPerNode pods each.
	Storm StormResult
}

// MultusSize is the Multus pattern at one size.
type MultusSize struct {
	Nodes   int
	IdleAPI APIWindow
	Watches int64
	Churn   ChurnResult
}

// Result is a Run's measurements.
type Result struct {
	Sizes  []SizeResult
	NADAdd NADResult
	// StormListWatch: the restart storm at the largest size with
	// client-go's WatchListClient off (LIST, then WATCH).
	StormListWatch StormResult
	// NADChurn: the churn loop with nri-cni's publishing limits;
	// NADChurnUnbounded with those of before issue 28.
	NADChurn, NADChurnUnbounded NADChurnResult
	Bare                        ChurnResult
	Multus                      []MultusSize
	Options                     Options
}

// Run measures a fleet on c (its own objects; the caller closes c). Logs of
// the agents go to log.
func Run(ctx context.Context, c *cluster.Cluster, dir string, o Options, log *logrus.Entry) (res *Result, err error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	installGates()
	f, err := New(ctx, c, dir, o.NADs, log)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	res = &Result{Options: o}
	for _, size := range o.Sizes {
		s := SizeResult{Nodes: size}
		t := time.Now()
		added, err := f.Grow(ctx, size, o.Parallel)
		if err != nil {
			return res, err
		}
		logf("fleet: %d nodes up (%d started in %.1fs)", size, len(added), time.Since(t).Seconds())
		if s.IdleAPI, s.Watches, s.IdleAgent, err = f.idle(ctx, o.Idle, f.Counts); err != nil {
			return res, err
		}
		s.SelfRSSMiB = SelfRSSMiB()
		// After the idle window: the ResourceSlice controller creates a
		// new node's slice asynchronously, after the agent synced.
		for _, n := range added {
			s.Start = s.Start.Plus(n.Agent().Counter.Snapshot())
		}
		s.StartAgent = len(added)
		if s.Churn, err = f.ChurnNRICNI(ctx, o.ChurnPerNode, o.Parallel); err != nil {
			return res, err
		}
		logf("fleet: %d nodes: %d pods churned in %.1fs", size, s.Churn.Pods, s.Churn.Seconds)
		if s.NADEdit, err = f.EditNAD(ctx, 0, len(res.Sizes)+1); err != nil {
			return res, err
		}
		if err := f.Standing(ctx, o.StandingPerNode, o.Parallel); err != nil {
			return res, err
		}
		if s.Storm, err = f.RestartAll(ctx); err != nil {
			return res, err
		}
		logf("fleet: %d nodes, %d pods running, restarted at once: synced in %.1fs, idle in %.1fs",
			size, s.Storm.Pods, s.Storm.Synced, s.Storm.Idle)
		res.Sizes = append(res.Sizes, s)
	}
	if res.NADAdd, err = f.AddNAD(ctx, o.NADs); err != nil {
		return res, err
	}
	logf("fleet: NAD added, every node republished in %.1fs", res.NADAdd.Seconds)
	if err := f.nadChurns(ctx, o, res, logf); err != nil {
		return res, err
	}
	restore := WatchList(false)
	res.StormListWatch, err = f.RestartAll(ctx)
	restore()
	if err != nil {
		return res, err
	}
	logf("fleet: restarted at once with WatchListClient off: synced in %.1fs", res.StormListWatch.Synced)
	f.StopAgents()
	if res.Bare, err = f.ChurnBare(ctx, o.ChurnPerNode, o.Parallel); err != nil {
		return res, err
	}
	if !o.Multus {
		return res, nil
	}
	m := f.StartMultus()
	defer m.Stop()
	for _, size := range o.Sizes {
		ms := MultusSize{Nodes: size}
		if err := m.Grow(ctx, size, o.Parallel); err != nil {
			return res, err
		}
		if ms.IdleAPI, ms.Watches, _, err = f.idle(ctx, o.Idle, m.Counts); err != nil {
			return res, err
		}
		if ms.Churn, err = m.Churn(ctx, o.ChurnPerNode, o.Parallel); err != nil {
			return res, err
		}
		logf("fleet: Multus pattern, %d nodes: %d pods churned in %.1fs", size, ms.Churn.Pods, ms.Churn.Seconds)
		res.Multus = append(res.Multus, ms)
	}
	return res, nil
}

// idle watches the API server for d with nothing happening, after a
// settling pause, and counts the watches the clients hold and what they
// asked meanwhile.
func (f *Fleet) idle(ctx context.Context, d time.Duration, counts func() Snapshot) (APIWindow, int64, Snapshot, error) {
	select {
	case <-ctx.Done():
		return APIWindow{}, 0, Snapshot{}, ctx.Err()
	case <-time.After(3 * time.Second):
	}
	a0, err := SampleAPI(ctx, f.c)
	if err != nil {
		return APIWindow{}, 0, Snapshot{}, err
	}
	c0 := counts()
	select {
	case <-ctx.Done():
		return APIWindow{}, 0, Snapshot{}, ctx.Err()
	case <-time.After(d):
	}
	a1, err := SampleAPI(ctx, f.c)
	if err != nil {
		return APIWindow{}, 0, Snapshot{}, fmt.Errorf("idle window: %w", err)
	}
	c1 := counts()
	return Window(a0, a1), c1.OpenWatches, c1.Sub(c0), nil
}

// nadChurns runs the NAD churn loop (o.NADChurn), with nri-cni's limits and,
// with o.NADChurnUnbounded, with those of before issue 28 (the agents
// restarted for it; agents started later get the defaults).
func (f *Fleet) nadChurns(ctx context.Context, o Options, res *Result, logf func(string, ...any)) (err error) {
	if o.NADChurn <= 0 {
		return nil
	}
	rate := o.NADChurnRate
	if rate <= 0 {
		rate = 2
	}
	settle := o.NADChurnSettle
	if settle <= 0 {
		settle = 25 * time.Second
	}
	if res.NADChurn, err = f.NADChurn(ctx, o.NADChurn, rate, settle); err != nil {
		return err
	}
	logf("fleet: NAD churn, %d changes: %d publishes, %d refreshes on %d nodes", res.NADChurn.Changes,
		res.NADChurn.Publishes, res.NADChurn.Refreshes, res.NADChurn.Agents)
	if !o.NADChurnUnbounded {
		return nil
	}
	restart := func() error {
		f.StopAgents()
		return f.StartAgents(ctx, f.Nodes(), o.Parallel)
	}
	f.SetPublishing("publishing as before issue 28", Unbounded)
	// The next restart (the storm that follows) starts them with the
	// defaults again.
	defer f.SetPublishing("", dra.PublishLimits{})
	if err := restart(); err != nil {
		return err
	}
	if res.NADChurnUnbounded, err = f.NADChurn(ctx, o.NADChurn, rate, settle); err != nil {
		return err
	}
	logf("fleet: NAD churn, unbounded: %d publishes, %d refreshes", res.NADChurnUnbounded.Publishes, res.NADChurnUnbounded.Refreshes)
	return nil
}
