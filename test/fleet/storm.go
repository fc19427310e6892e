package fleet

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// StormResult is every agent restarted at once.
type StormResult struct {
	Agents, Pods int
	// Synced: seconds from the restart until every agent's informers had
	// synced and its resync with the runtime was done (the slowest
	// agent); SyncedP50 the median agent's. Idle: until every agent had
	// also written what the restart made it queue.
	Synced, SyncedP50, Idle float64
	// Agent: the new agents' requests until then, by verb and resource.
	Agent Snapshot
	API   APIWindow
	// PeakCores: the API server's highest CPU use over any 0.5 s.
	PeakCores float64
	// Bystander: another workload's reads meanwhile.
	Bystander Bystander
}

// RestartAll stops every agent, then starts them all at once (a rollout
// of the DaemonSet with no surge limit, or every node restarted), as new
// processes with empty caches over their nodes' records and running pods.
func (f *Fleet) RestartAll(ctx context.Context) (StormResult, error) {
	nodes := f.Nodes()
	pods := 0
	for _, n := range nodes {
		pods += n.Running()
	}
	probe := ""
	for _, n := range nodes {
		if probe = n.AnyPod(); probe != "" {
			break
		}
	}
	stopProbe, err := f.bystander(ctx, probe)
	if err != nil {
		return StormResult{}, err
	}
	f.StopAgents()
	time.Sleep(2 * time.Second) // the old watches' ends reach the API server
	a0, err := SampleAPI(ctx, f.c)
	if err != nil {
		return StormResult{}, err
	}
	peak := watchCPU(f.c.Pids()["kube-apiserver"], 500*time.Millisecond)
	start := time.Now()
	startErr := f.StartAgents(ctx, nodes, 0)
	idle := time.Since(start).Seconds()
	cores := peak.Stop()
	by := stopProbe()
	if startErr != nil {
		return StormResult{}, fmt.Errorf("restart storm: %w", startErr)
	}
	a1, err := SampleAPI(ctx, f.c)
	if err != nil {
		return StormResult{}, err
	}
	var synced []float64
	for _, a := range f.agents() {
		synced = append(synced, a.Ready().Sub(start).Seconds())
	}
	sort.Float64s(synced)
	return StormResult{Agents: len(nodes), Pods: pods, Synced: synced[len(synced)-1], SyncedP50: synced[len(synced)/2],
		Idle: idle, Agent: f.Counts(), API: Window(a0, a1), PeakCores: cores, Bystander: by}, nil
}
