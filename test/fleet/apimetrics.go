package fleet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nri-cni/nri-cni/test/cluster"
)

// APISample is the API server as its /metrics shows it at one moment, and
// the CPU time of it and etcd from /proc.
type APISample struct {
	At time.Time
	// CPUSeconds and RSSBytes: process_cpu_seconds_total,
	// process_resident_memory_bytes.
	CPUSeconds, RSSBytes float64
	// Watches: apiserver_longrunning_requests of verb WATCH (what replaced
	// apiserver_registered_watchers, removed in 1.25).
	Watches float64
	// WatchEvents and WatchEventBytes: apiserver_watch_events_total and
	// apiserver_watch_events_sizes_sum, summed over kinds (every watcher's).
	WatchEvents, WatchEventBytes float64
	// Requests: apiserver_request_total summed; Rejected:
	// apiserver_flowcontrol_rejected_requests_total summed (priority and
	// fairness turned them away).
	Requests, Rejected float64
	// RejectedBy: Rejected by "flow schema/priority level/reason".
	RejectedBy map[string]float64
	// EtcdCPUSeconds: etcd's utime+stime (/proc).
	EtcdCPUSeconds float64
}

// SampleAPI reads the API server's /metrics as the admin.
func SampleAPI(ctx context.Context, c *cluster.Cluster) (APISample, error) {
	s := APISample{At: time.Now(), RejectedBy: map[string]float64{}}
	body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, labels, v, ok := parseMetric(sc.Text())
		if !ok {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			s.CPUSeconds = v
		case "process_resident_memory_bytes":
			s.RSSBytes = v
		case "apiserver_watch_events_total":
			s.WatchEvents += v
		case "apiserver_watch_events_sizes_sum":
			s.WatchEventBytes += v
		case "apiserver_longrunning_requests":
			if strings.Contains(labels, `verb="WATCH"`) {
				s.Watches += v
			}
		case "apiserver_request_total":
			s.Requests += v
		case "apiserver_flowcontrol_rejected_requests_total":
			s.Rejected += v
			key := label(labels, "flow_schema") + "/" + label(labels, "priority_level") + "/" + label(labels, "reason")
			s.RejectedBy[key] += v
		}
	}
	if pid := c.Pids()["etcd"]; pid > 0 {
		s.EtcdCPUSeconds, _ = procCPUSeconds(pid)
	}
	return s, nil
}

// parseMetric splits one line of the Prometheus text format.
func parseMetric(line string) (name, labels string, v float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", "", 0, false
	}
	head := line[:i]
	if j := strings.IndexByte(head, '{'); j >= 0 {
		return head[:j], head[j:], v, true
	}
	return head, "", v, true
}

// label is one label's value in a metric's {…} ("" if absent).
func label(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux for every architecture Go supports here).
const clockTicks = 100

// procCPUSeconds is a process's user + system CPU time.
func procCPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) in parentheses.
	rest := data[bytes.LastIndexByte(data, ')')+2:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q %q", pid, f[11], f[12])
	}
	return (utime + stime) / clockTicks, nil
}

// cpuPeak samples a process's CPU use every period until stopped and
// keeps the highest rate (cores) over any one period.
type cpuPeak struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak float64
}

func watchCPU(pid int, period time.Duration) *cpuPeak {
	p := &cpuPeak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		last, _ := procCPUSeconds(pid)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			cur, err := procCPUSeconds(pid)
			if err != nil {
				continue
			}
			p.mu.Lock()
			p.peak = max(p.peak, (cur-last)/period.Seconds())
			p.mu.Unlock()
			last = cur
		}
	}()
	return p
}

// Stop ends the sampling and returns the peak (cores).
func (p *cpuPeak) Stop() float64 {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

// APIWindow is what the API server did between two samples.
type APIWindow struct {
	Seconds float64
	// Cores: CPU seconds per second (API server, etcd).
	Cores, EtcdCores float64
	// RSSMiB and Watches at the end.
	RSSMiB, Watches float64
	// WatchEvents and WatchEventBytes sent in the window (to every watcher).
	WatchEvents, WatchEventBytes float64
	// Requests and Rejected in the window; RejectedBy as in APISample.
	Requests, Rejected float64
	RejectedBy         map[string]float64
	// CPUSeconds: the API server's CPU time in the window.
	CPUSeconds float64
}

// Window compares two samples.
func Window(a, b APISample) APIWindow {
	w := APIWindow{Seconds: b.At.Sub(a.At).Seconds(), RSSMiB: b.RSSBytes / (1 << 20), Watches: b.Watches,
		WatchEvents: b.WatchEvents - a.WatchEvents, WatchEventBytes: b.WatchEventBytes - a.WatchEventBytes,
		Requests: b.Requests - a.Requests, Rejected: b.Rejected - a.Rejected, CPUSeconds: b.CPUSeconds - a.CPUSeconds}
	w.RejectedBy = map[string]float64{}
	for k, v := range b.RejectedBy {
		if d := v - a.RejectedBy[k]; d > 0 {
			w.RejectedBy[k] = d
		}
	}
	if w.Seconds > 0 {
		w.Cores = w.CPUSeconds / w.Seconds
		w.EtcdCores = (b.EtcdCPUSeconds - a.EtcdCPUSeconds) / w.Seconds
	}
	return w
}

// SelfRSSMiB is this process's resident set size (every simulated agent's
// memory, and the bench's).
func SelfRSSMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	var kib float64
	if i := strings.Index(string(data), "VmRSS:"); i >= 0 {
		_, _ = fmt.Sscanf(string(data[i:]), "VmRSS: %f", &kib)
	}
	return kib / 1024
}
