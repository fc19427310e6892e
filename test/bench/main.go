// Command bench measures how close nri-cni gets to the raw cost of the CNI
// chain it runs (root; `make bench`). Every comparison runs both sides in the
// same run, interleaved, and is reported as a ratio. Results are printed as a
// table and written as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"syscall"
	"time"

	"github.com/nri-cni/nri-cni/test/harness"
)

// Row is one line of the report.
type Row struct {
	Section string  `json:"section"`
	Metric  string  `json:"metric"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Target  string  `json:"target,omitempty"`
	Met     *bool   `json:"met,omitempty"`
	Note    string  `json:"note,omitempty"`
}

type report struct {
	Machine map[string]string `json:"machine"`
	Rows    []Row             `json:"rows"`
}

func (r *report) add(row Row) { r.Rows = append(r.Rows, row) }

// check adds a row with a target: met when value <= limit.
func (r *report) check(section, metric string, value float64, unit string, limit float64, target string) {
	r.checkNote(section, metric, value, unit, limit, target, "")
}

// checkNote is check with a note.
func (r *report) checkNote(section, metric string, value float64, unit string, limit float64, target, note string) {
	met := value <= limit
	r.add(Row{Section: section, Metric: metric, Value: value, Unit: unit, Target: target, Met: &met, Note: note})
}

// env is what every section shares.
type env struct {
	dir         string
	tools       harness.Tools
	bin         string
	recorderDir string
}

func main() {
	out := flag.String("out", "bin/bench.json", "JSON results file")
	quick := flag.Bool("quick", false, "fewer iterations (smoke run)")
	only := flag.String("only", "", "run one section: engine, nri, containerd, crio, scale, hook, k8s, density, multinet, fleet, upgrade, mnp")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run (pprof)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, *quick, *only)
	if rep != nil {
		print(rep)
		if data, jerr := json.MarshalIndent(rep, "", "  "); jerr == nil {
			_ = os.MkdirAll(filepath.Dir(*out), 0o755)
			if werr := os.WriteFile(*out, data, 0o644); werr == nil {
				fmt.Printf("\nresults: %s\n", *out)
			}
		}
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintf(os.Stderr, "bench FAILED: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, quick bool, only string) (*report, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("run as root (real netns, bridge, containerd)")
	}
	rep := &report{Machine: machine()}
	tools, err := harness.EnsureTools()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ncbench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	e := &env{dir: dir, tools: tools, recorderDir: filepath.Join(dir, "rec")}
	if e.bin, err = harness.GoBuild(dir, "./cmd/nri-cni", "nri-cni"); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(e.recorderDir, 0o755); err != nil {
		return nil, err
	}
	if _, err := harness.GoBuild(e.recorderDir, "./test/fakes/cni-recorder", "cni-recorder"); err != nil {
		return nil, err
	}
	n := func(full, small int) int {
		if quick {
			return small
		}
		return full
	}
	sections := []struct {
		name string
		fn   func() error
	}{
		{"engine", func() error { return benchEngine(ctx, e, rep, n(300, 30)) }},
		{"nri", func() error { return benchNRI(ctx, e, rep, n(300, 20)) }},
		{"containerd", func() error { return benchContainerd(ctx, e, rep, n(100, 20)) }},
		{"crio", func() error { return benchCRIO(ctx, e, rep, n(100, 20)) }},
		{"scale", func() error { return benchScale(ctx, e, rep, n(1000, 200)) }},
		{"hook", func() error { return benchHook(ctx, e, rep, n(100, 15)) }},
		{"k8s", func() error { return benchK8s(ctx, e, rep, n(30, 10)) }},
		{"density", func() error { return benchDensity(ctx, e, rep, n(100, 30), n(densityRounds(), 1)) }},
		{"multinet", func() error { return benchMultiNet(ctx, e, rep, n(40, 10)) }},
		{"fleet", func() error { return benchFleet(ctx, e, rep, quick) }},
		{"upgrade", func() error { return benchUpgrade(ctx, e, rep, n(30, 10), n(3, 1)) }},
		{"mnp", func() error { return benchMNP(ctx, e, rep, n(60, 10), n(5, 2)) }},
	}
	for _, s := range sections {
		if only != "" && only != s.name {
			continue
		}
		fmt.Printf("==> %s\n", s.name)
		if err := s.fn(); err != nil {
			return rep, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return rep, nil
}

func print(rep *report) {
	fmt.Printf("\n%-12s %-58s %12s  %-10s %s\n", "SECTION", "METRIC", "VALUE", "TARGET", "")
	for _, r := range rep.Rows {
		mark := ""
		if r.Met != nil {
			mark = "ok"
			if !*r.Met {
				mark = "MISSED"
			}
		}
		fmt.Printf("%-12s %-58s %9.2f %-3s %-10s %-6s %s\n", r.Section, r.Metric, r.Value, r.Unit, r.Target, mark, r.Note)
	}
}

// paired returns the medians of b[i]/a[i] and of b[i]-a[i] (ms) over
// interleaved pairs: each pair ran back to back, so machine drift cancels
// out, which the ratio of two separately taken p50s does not do.
func paired(a, b []time.Duration) (ratio, deltaMs float64) {
	rs := make([]float64, len(a))
	ds := make([]time.Duration, len(a))
	for i := range a {
		rs[i] = float64(b[i]) / float64(a[i])
		ds[i] = b[i] - a[i]
	}
	sort.Float64s(rs)
	return rs[len(rs)/2], pct(ds, 50)
}

// pct returns the p-th percentile (0-100) of ds in milliseconds.
func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return float64(s[i].Microseconds()) / 1000
}

func machine() map[string]string {
	m := map[string]string{"go": goVersion()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m["cpu"] = firstField(string(data), "model name")
	}
	m["cores"] = fmt.Sprint(numCPU())
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m["kernel"] = string(trim(data))
	}
	return m
}
