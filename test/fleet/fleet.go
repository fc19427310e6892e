package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/test/cluster"
)

// Fleet is the simulated nodes of one cluster and their agents.
type Fleet struct {
	c     *cluster.Cluster
	dir   string
	dep   *deployment
	log   *logrus.Entry
	admin kubernetes.Interface // the workload's client: creates and deletes pods, edits NADs
	nads  int

	mu    sync.Mutex // guards nodes, dep.config, publishing, limitsName
	nodes []*Node
	seq   int
	// publishing: the DRA drivers' limits of agents started from now on
	// (SetPublishing), named limitsName; churnSeq: the NAD churn's next.
	publishing dra.PublishLimits
	limitsName string
	churnSeq   int
}

// New prepares the cluster for a fleet (deploy/base, deploy/hotplug, the
// namespace, nads NADs) in dir; logs go to log.
func New(ctx context.Context, c *cluster.Cluster, dir string, nads int, log *logrus.Entry) (*Fleet, error) {
	dep, err := prepare(ctx, c, nads)
	if err != nil {
		return nil, err
	}
	// The workload (a controller creating pods) is not nri-cni: a client
	// of its own whose rate limit does not shape the measurement.
	rc := rest.CopyConfig(c.RESTConfig)
	rc.QPS, rc.Burst = 1000, 2000
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("workload client: %w", err)
	}
	return &Fleet{c: c, dir: dir, dep: dep, log: log, admin: admin, nads: nads}, nil
}

// Nodes are the fleet's nodes so far.
func (f *Fleet) Nodes() []*Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Node(nil), f.nodes...)
}

// NodeName is the i-th simulated node's name.
func NodeName(i int) string { return fmt.Sprintf("fleet-%04d", i) }

// Grow adds nodes until there are size: each a Node object, a bound pod
// of nri-cni's ServiceAccount and its token, then their agents, started
// parallel at a time (a DaemonSet rolling out), each until it has synced.
func (f *Fleet) Grow(ctx context.Context, size, parallel int) ([]*Node, error) {
	have := len(f.Nodes())
	var added []*Node
	for i := have; i < size; i++ {
		name := NodeName(i)
		n, err := newNode(filepath.Join(f.dir, name), name, i, f.dep.networks)
		if err != nil {
			return nil, err
		}
		if err := createNode(ctx, f.admin, name); err != nil {
			return nil, err
		}
		if n.Token, err = daemonToken(ctx, f.admin, NRICNIAccount, name); err != nil {
			return nil, err
		}
		added = append(added, n)
	}
	f.mu.Lock()
	f.nodes = append(f.nodes, added...)
	f.mu.Unlock()
	return added, f.StartAgents(ctx, added, parallel)
}

// StartAgents starts the nodes' agents, parallel at a time (0: all at
// once), and waits until each has synced.
func (f *Fleet) StartAgents(ctx context.Context, nodes []*Node, parallel int) error {
	if parallel <= 0 {
		parallel = len(nodes)
	}
	sem := make(chan struct{}, max(parallel, 1))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f.mu.Lock()
			cfg, limits := f.dep.config, f.publishing
			f.mu.Unlock()
			a, err := StartAgent(ctx, n, f.c.RESTConfig, cfg, limits, f.log)
			if err != nil {
				errs[i] = err
				return
			}
			n.setAgent(a)
			errs[i] = waitUntil(ctx, 5*time.Minute, func() bool { return a.Idle() }, "node "+n.Name+": nri-cni synced")
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StopAgents stops every node's agent.
func (f *Fleet) StopAgents() {
	var wg sync.WaitGroup
	for _, n := range f.Nodes() {
		if a := n.Agent(); a != nil {
			wg.Add(1)
			go func() { defer wg.Done(); a.Stop() }()
			n.setAgent(nil)
		}
	}
	wg.Wait()
}

// Counts is the sum of the running agents' counters.
func (f *Fleet) Counts() Snapshot {
	var s Snapshot
	for _, n := range f.Nodes() {
		if a := n.Agent(); a != nil {
			s = s.Plus(a.Counter.Snapshot())
		}
	}
	return s
}

// agents are the running agents.
func (f *Fleet) agents() []*Agent {
	var out []*Agent
	for _, n := range f.Nodes() {
		if a := n.Agent(); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// Idle waits until every agent has written what it queued.
func (f *Fleet) Idle(ctx context.Context, timeout time.Duration) error {
	return waitUntil(ctx, timeout, func() bool {
		for _, a := range f.agents() {
			if !a.Idle() {
				return false
			}
		}
		return true
	}, "every agent idle")
}

// Close stops the agents and removes the nodes' dirs (the cluster, with
// its objects, is the caller's).
func (f *Fleet) Close() error {
	f.StopAgents()
	var errs []error
	for _, n := range f.Nodes() {
		if err := os.RemoveAll(n.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitUntil polls cond every 10 ms.
func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool, what string) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// podName is a unique pod name on node n.
func (f *Fleet) podName(n *Node, kind string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return fmt.Sprintf("%s-%s-%d", kind, strings.TrimPrefix(n.Name, "fleet-"), f.seq)
}

// Configure edits the nri.conf that agents started from now on get
// (deploy/base's, as prepared): a test's narrower limits.
func (f *Fleet) Configure(edit func(*config.Config)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg := f.dep.config
	k := *cfg.Kubernetes
	if k.DRA != nil {
		d := *k.DRA
		k.DRA = &d
	}
	cfg.Kubernetes = &k
	edit(&cfg)
	f.dep.config = cfg
}
