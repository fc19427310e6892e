package main

import (
	"fmt"

	"github.com/nri-cni/nri-cni/test/fleet"
)

// fleetTarget is the fleet the bench extrapolates to.
const fleetTarget = 5000

// fleetFits fits the measurements that grow with the fleet (a line over
// the sizes measured) and reads the lines at fleetTarget nodes.
func fleetFits(rep *report, r *fleet.Result) {
	if len(r.Sizes) < 3 { // a line through two points says nothing of its fit
		return
	}
	var xs []float64
	series := map[string][]float64{}
	order := []string{"API server CPU, fleet idle (mcores)", "API server RSS, fleet idle (MiB)",
		"restart at once: API server CPU (s)", "restart at once: converge (s)", "restart at once: 429s"}
	for _, z := range r.Sizes {
		xs = append(xs, float64(z.Nodes))
		series[order[0]] = append(series[order[0]], z.IdleAPI.Cores*1000)
		series[order[1]] = append(series[order[1]], z.IdleAPI.RSSMiB)
		series[order[2]] = append(series[order[2]], z.Storm.API.CPUSeconds)
		series[order[3]] = append(series[order[3]], z.Storm.Synced)
		series[order[4]] = append(series[order[4]], float64(z.Storm.Agent.Sum(nil).Throttled))
	}
	for _, name := range order {
		l := fleet.Fit(xs, series[name])
		rep.add(Row{Section: fleetSection, Metric: fmt.Sprintf("fit %s at %d nodes", name, fleetTarget), Value: l.At(fleetTarget),
			Note: fmt.Sprintf("a + b·nodes: a %.4g, b %.4g per node, R² %.3f over %v nodes (this 2-core API server)", l.A, l.B, l.R2, xs)})
	}
}

// initialListBytes renders a storm's initial-list bytes per node by
// resource.
func initialListBytes(st fleet.StormResult) string {
	n := float64(max(st.Agents, 1))
	var out string
	for _, res := range []string{"pods", "network-attachment-definitions", "resourceslices"} {
		b := st.Agent.Sum(func(k fleet.Key) bool { return fleet.IsInitialList(k) && k.Resource == res }).Bytes
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%s %.1f KiB", res, float64(b)/n/1024)
	}
	return out
}
