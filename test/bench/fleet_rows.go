package main

import (
	"fmt"

	"github.com/nri-cni/nri-cni/test/fleet"
)

// fleetRows turns a fleet run into report rows.
func fleetRows(rep *report, r *fleet.Result) {
	const s = fleetSection
	add := func(metric string, v float64, unit, note string) {
		rep.add(Row{Section: s, Metric: metric, Value: v, Unit: unit, Note: note})
	}
	check := func(metric string, v float64, unit string, limit float64, target, note string) {
		met := v <= limit
		rep.add(Row{Section: s, Metric: metric, Value: v, Unit: unit, Target: target, Met: &met, Note: note})
	}
	for _, z := range r.Sizes {
		n := float64(z.Nodes)
		p := fmt.Sprintf("%d nodes: ", z.Nodes)
		check(p+"watches held per node", float64(z.Watches)/n, "", 3, "<= 3",
			fmt.Sprintf("API server: %.0f WATCH requests in flight (all clients)", z.IdleAPI.Watches))
		sa := float64(max(z.StartAgent, 1))
		add(p+"requests per node at start", float64(z.Start.Sum(nil).Requests)/sa, "",
			fmt.Sprintf("%s; %.1f KiB received", byVerb(z.Start, sa), float64(z.Start.Sum(nil).Bytes)/sa/1024))
		add(p+"API server CPU, fleet idle", z.IdleAPI.Cores*1000, "mcores",
			fmt.Sprintf("RSS %.0f MiB; etcd %.0f mcores; %.1f requests/s (all clients), nri-cni's %.2f/s", z.IdleAPI.RSSMiB,
				z.IdleAPI.EtcdCores*1000, z.IdleAPI.Requests/z.IdleAPI.Seconds, float64(z.IdleAgent.Sum(nil).Requests)/z.IdleAPI.Seconds))
		add(p+"simulating process RSS per node", z.SelfRSSMiB/n, "MiB",
			fmt.Sprintf("%.0f MiB for %d agents in one process (shared code and runtime: an upper bound per agent's caches)", z.SelfRSSMiB, z.Nodes))
		c := z.Churn
		pods := float64(max(c.Pods, 1))
		check(p+"nri-cni writes per pod lifecycle", writes(c.Plugin)/pods, "", 1, "<= 1",
			fmt.Sprintf("%s (%d pods: create → RunPodSandbox → status → delete → Stop/Remove)", byVerb(c.Plugin, pods), c.Pods))
		add(p+"nri-cni requests per pod lifecycle", float64(c.Plugin.Sum(nil).Requests)/pods, "",
			fmt.Sprintf("%.1f KiB received per pod (watch events of a %d-byte pod included)", float64(c.Plugin.Sum(nil).Bytes)/pods/1024, c.PodBytes))
		add(p+"API server CPU per pod lifecycle, nri-cni", c.API.CPUSeconds/pods*1000, "ms",
			fmt.Sprintf("%.1f pods/s; %.2f cores; RSS %.0f MiB; workload's create+delete included", pods/c.Seconds, c.API.Cores, c.API.RSSMiB))
		e := z.NADEdit
		add(p+"bytes received per NAD change, per node", float64(e.NADBytes)/n, "B",
			fmt.Sprintf("fleet-wide %.1f KiB; every cache had it in %.2f s; other requests: %s", float64(e.NADBytes)/1024, e.Seconds, byVerb(e.Agent, n)))
		stormRows(add, check, p+"restart at once: ", z.Storm, true)
	}
	if a := r.NADAdd; a.Agents > 0 {
		n := float64(a.Agents)
		add(fmt.Sprintf("%d nodes: a new NAD, ResourceSlice writes per node", a.Agents),
			float64(a.Agent.Sum(func(k fleet.Key) bool { return k.Resource == "resourceslices" && fleet.IsWrite(k) }).Requests)/n, "",
			fmt.Sprintf("every node publishes it as a device; %.1f KiB received per node; API server %.0f ms CPU for the change",
				float64(a.Agent.Sum(nil).Bytes)/n/1024, a.API.CPUSeconds*1000))
	}
	nadChurnRows(add, check, r.NADChurn, true)
	nadChurnRows(add, check, r.NADChurnUnbounded, false)
	if st := r.StormListWatch; st.Agents > 0 {
		stormRows(add, check, fmt.Sprintf("%d nodes: restart at once, WatchListClient off: ", st.Agents), st, false)
	}
	if b := r.Bare; b.Pods > 0 {
		add(fmt.Sprintf("%d nodes: API server CPU per pod lifecycle, no plugin", r.Sizes[len(r.Sizes)-1].Nodes), b.API.CPUSeconds/float64(b.Pods)*1000, "ms",
			fmt.Sprintf("the workload's create+delete alone, %d pods, %.1f pods/s", b.Pods, float64(b.Pods)/b.Seconds))
	}
	fleetFits(rep, r)
	for _, m := range r.Multus {
		n := float64(m.Nodes)
		p := fmt.Sprintf("%d nodes: Multus pattern ", m.Nodes)
		pods := float64(max(m.Churn.Pods, 1))
		add(p+"watches held per node", float64(m.Watches)/n, "", "one pod informer per node")
		add(p+"API server CPU, fleet idle", m.IdleAPI.Cores*1000, "mcores", fmt.Sprintf("RSS %.0f MiB", m.IdleAPI.RSSMiB))
		add(p+"writes per pod lifecycle", writes(m.Churn.Plugin)/pods, "", byVerb(m.Churn.Plugin, pods))
		add(p+"requests per pod lifecycle", float64(m.Churn.Plugin.Sum(nil).Requests)/pods, "",
			fmt.Sprintf("%.1f KiB received per pod", float64(m.Churn.Plugin.Sum(nil).Bytes)/pods/1024))
		add(p+"API server CPU per pod lifecycle", m.Churn.API.CPUSeconds/pods*1000, "ms",
			fmt.Sprintf("%.1f pods/s; RSS %.0f MiB", pods/m.Churn.Seconds, m.Churn.API.RSSMiB))
	}
}

// stormRows: a restart of every agent at once; targets only where
// targets says (the default client).
func stormRows(add func(string, float64, string, string), check func(string, float64, string, float64, string, string),
	p string, st fleet.StormResult, targets bool) {
	if st.Agents == 0 {
		return
	}
	n := float64(st.Agents)
	lists := st.Agent.Sum(fleet.IsInitialList)
	row := func(metric string, v float64, unit string, limit float64, target, note string) {
		if targets {
			check(metric, v, unit, limit, target, note)
			return
		}
		add(metric, v, unit, note)
	}
	row(p+"initial lists per node (admitted)", float64(lists.Requests-lists.Errors)/n, "", 3, "<= 3",
		fmt.Sprintf("LIST+WATCHLIST, %.1f KiB per node (%s); every request per node (429s included): %s",
			float64(lists.Bytes)/n/1024, initialListBytes(st), byVerb(st.Agent, n)))
	row(p+"writes per running pod", writes(st.Agent)/float64(max(st.Pods, 1)), "", 0.05, "<= 0.05",
		fmt.Sprintf("%d pods running", st.Pods))
	row(p+"converge (every informer synced, resync done)", st.Synced, "s", 10, "<= 10 s",
		fmt.Sprintf("median node %.2f s; every write done %.2f s", st.SyncedP50, st.Idle))
	add(p+"requests turned away (429) per node, retried", float64(st.Agent.Sum(nil).Throttled)/n, "",
		fmt.Sprintf("%d in all (API server: %.0f rejected by priority and fairness %v); errors %d", st.Agent.Sum(nil).Throttled,
			st.API.Rejected, st.API.RejectedBy, st.Agent.Sum(nil).Errors))
	b := st.Bystander
	row(p+"a bystander's GET p99 meanwhile", float64(b.P99.Microseconds())/1000, "ms", 1000, "<= 1000 ms",
		fmt.Sprintf("another kube-system ServiceAccount (nri-cni's FlowSchema and flow): p50 %.1f ms, max %.0f ms, %d GETs, %d throttled, %d failed",
			float64(b.P50.Microseconds())/1000, float64(b.Max.Microseconds())/1000, b.Requests, b.Throttled, b.Failed))
	add(p+"API server CPU", st.API.CPUSeconds, "s",
		fmt.Sprintf("peak %.2f cores over 0.5 s; RSS %.0f MiB after; %.1f MiB of watch events sent (all watchers)",
			st.PeakCores, st.API.RSSMiB, st.API.WatchEventBytes/(1<<20)))
}

func writes(x fleet.Snapshot) float64 { return float64(x.Sum(fleet.IsWrite).Requests) }

// nadChurnRows: a NAD churn loop, per node: the ResourceSlice writes (with
// nri-cni's limits checked against its publish bucket: a burst of 3, then
// one per 20 s) and the CPU of the agents' process.
func nadChurnRows(add func(string, float64, string, string), check func(string, float64, string, float64, string, string),
	c fleet.NADChurnResult, bounded bool) {
	if c.Agents == 0 {
		return
	}
	n := float64(c.Agents)
	limits := "nri-cni's limits"
	if c.Limits != "" {
		limits = c.Limits
	}
	p := fmt.Sprintf("%d nodes: NAD churn (%d changes in %.0f s, %s): ", c.Agents, c.Changes, c.Seconds, limits)
	writes := float64(c.Agent.Sum(func(k fleet.Key) bool { return k.Resource == "resourceslices" && fleet.IsWrite(k) }).Requests) / n
	perMin := 60 / c.Window
	note := fmt.Sprintf("%.1f per node per minute over the %.0f-s window; %.1f publishes and %.1f inventories built per node; "+
		"every request per node: %s", writes*perMin, c.Window, float64(c.Publishes)/n, float64(c.Refreshes)/n, byVerb(c.Agent, n))
	if bounded {
		limit := 3 + c.Window/20
		check(p+"ResourceSlice writes per node", writes, "", limit, fmt.Sprintf("<= %.1f (3 + 1 per 20 s)", limit), note)
	} else {
		add(p+"ResourceSlice writes per node", writes, "", note)
	}
	add(p+"CPU per node", c.SelfCPUSeconds/n*1000, "ms",
		fmt.Sprintf("%.0f ms per node per minute; the process simulating every agent (NAD watch, DRA driver) over %d agents; API server %.2f s CPU",
			c.SelfCPUSeconds/n*1000*perMin, c.Agents, c.API.CPUSeconds))
}
