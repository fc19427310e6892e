package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"

	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/fleet"
)

// benchFleet: 9. the API cost of a fleet of nodes running nri-cni's
// Kubernetes mode, simulated in this process against one real API server
// (test/fleet), at growing sizes; every agent restarted at once; the
// Multus thick request pattern on the same fleet and pods. FLEET_SIZES
// (e.g. "50,100,200") overrides the sizes.
func benchFleet(ctx context.Context, e *env, rep *report, quick bool) (err error) {
	o := fleet.Options{Sizes: []int{50, 100, 200}, ChurnPerNode: 3, StandingPerNode: 10, NADs: 10, Parallel: 16,
		Idle: 20 * time.Second, Multus: true, Logf: func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) },
		NADChurn: time.Minute, NADChurnRate: 2, NADChurnUnbounded: true}
	if quick {
		o.Sizes, o.ChurnPerNode, o.StandingPerNode, o.Idle, o.NADChurn = []int{5, 10}, 2, 3, 5*time.Second, 20*time.Second
	}
	if v := os.Getenv("FLEET_SIZES"); v != "" {
		if o.Sizes, err = parseSizes(v); err != nil {
			return err
		}
	}
	dir := filepath.Join(e.dir, "fleet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// 200 agents' client-go logs (reflectors, the Event broadcaster) and
	// their nri-cni logs go to a file, not the report.
	logFile, err := os.Create(filepath.Join(dir, "agents.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	kf := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kf)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := kf.Set(k, v); err != nil {
			return fmt.Errorf("klog flag %s: %w", k, err)
		}
	}
	klog.SetOutput(logFile)
	logger := logrus.New()
	logger.SetOutput(logFile)
	logger.SetLevel(logrus.WarnLevel)
	ktools, err := cluster.EnsureTools(ctx)
	if err != nil {
		return err
	}
	load0 := fleetLoad()
	c, err := cluster.Start(ctx, cluster.Opts{Dir: filepath.Join(dir, "c"), Tools: ktools, RuntimeTools: e.tools})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close(context.WithoutCancel(ctx))) }()
	res, err := fleet.Run(ctx, c, filepath.Join(dir, "nodes"), o, logrus.NewEntry(logger))
	if res != nil {
		fleetRows(rep, res)
	}
	rep.add(Row{Section: fleetSection, Metric: "load average (1 min) at start", Value: load0, Unit: "",
		Note: fmt.Sprintf("at end %.2f; %d cores", fleetLoad(), numCPU())})
	if err != nil {
		return fmt.Errorf("%w\nagents' log: %s", err, filepath.Join(dir, "agents.log"))
	}
	return nil
}

const fleetSection = "9 fleet"

func parseSizes(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("FLEET_SIZES %q: %q is not a node count", v, f)
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out, nil
}

func fleetLoad() float64 {
	var l float64
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		_, _ = fmt.Sscanf(string(data), "%f", &l)
	}
	return l
}

// byVerb renders a snapshot's requests per unit by verb and resource,
// e.g. "PATCH pods 1.00, WATCH pods 0.01".
func byVerb(s fleet.Snapshot, per float64) string {
	type kv struct {
		k fleet.Key
		v fleet.Stat
	}
	var all []kv
	for k, v := range s.Stats {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v.Requests != all[j].v.Requests {
			return all[i].v.Requests > all[j].v.Requests
		}
		return all[i].k.Verb+all[i].k.Resource < all[j].k.Verb+all[j].k.Resource
	})
	var parts []string
	for _, x := range all {
		if x.v.Requests == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s %.2f", x.k.Verb, x.k.Resource, float64(x.v.Requests)/per))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
