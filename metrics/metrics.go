// Package metrics exposes nri-cni's Prometheus metrics and health endpoint
// on a registry of its own (no process-global state).
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are nri-cni's metrics.
type Metrics struct {
	reg       *prometheus.Registry
	ops       *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	connected prometheus.Gauge
	ready     *prometheus.GaugeVec
	checks    *prometheus.CounterVec
	started   prometheus.Counter
	unprot    prometheus.Counter
	failOpen  prometheus.Gauge
	// draUnpublished: the networks the DRA driver leaves out, by reason.
	draUnpublished *prometheus.GaugeVec
	// nodeState: the node's fail-closed state, one-hot by state;
	// awaitHook: whether the await hook's binary can run, by path.
	nodeState, awaitHook *prometheus.GaugeVec
	// draCheckpoint: whether the kubelet's DRA checkpoint cannot be read,
	// by reason.
	draCheckpoint *prometheus.GaugeVec
	// nadDropped: the NADs the node's NAD cache holds no content of now.
	nadDropped prometheus.Gauge
	// mnp: MultiNetworkPolicy's (mnp.go).
	mnp  *mnpMetrics
	isUp atomic.Bool
	// ready answers /readyz (nil: ready iff connected).
	readiness atomic.Pointer[func() (bool, string)]
}

// New registers the metrics; attachments reports the current number of
// attached networks and pendingTeardowns the sandboxes whose teardown failed
// and is being retried (both read at scrape time).
func New(attachments, pendingTeardowns func() float64) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nri_cni_operations_total",
			Help: "CNI operations run by nri-cni, by operation (add, del), network and result (ok, error).",
		}, []string{"op", "network", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nri_cni_operation_duration_seconds",
			Help:    "Duration of CNI operations, by operation and network.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 1.5, 2, 5},
		}, []string{"op", "network"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nri_cni_runtime_connected",
			Help: "1 while nri-cni is connected to the runtime's NRI socket.",
		}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nri_cni_network_ready",
			Help: "1 while the network's plugins report ready (CNI STATUS; configs before CNI 1.1.0 count as ready), else 0.",
		}, []string{"network"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nri_cni_check_failures_total",
			Help: "Attachments whose CNI CHECK failed (drift), by network.",
		}, []string{"network"}),
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nri_cni_started_without_networks_total",
			Help: "Containers found running before their pod's networks were attached (nri-cni was not serving and the node did not refuse them).",
		}),
		unprot: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nri_cni_unprotected_pods_total",
			Help: "Pods given networks that do not require nri-cni (annotation required-plugins.noderesource.dev/pod): their containers would start without the networks while nri-cni is away.",
		}),
		failOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nri_cni_node_fail_open",
			Help: "1 when this node's runtime is not configured to refuse containers of pods that require nri-cni while it is away (see nri-cni status), else 0.",
		}),
	}
	m.reg.MustRegister(m.ops, m.duration, m.connected, m.ready, m.checks, m.started, m.unprot, m.failOpen,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nri_cni_attachments",
			Help: "Networks currently attached (from nri-cni's records).",
		}, attachments),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nri_cni_pending_teardowns",
			Help: "Sandboxes whose teardown (CNI DEL) failed and is retried in the background with backoff.",
		}, pendingTeardowns),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.draUnpublished = newDRAUnpublished()
	m.nodeState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nri_cni_node_fail_closed_state",
		Help: "1 for this node's fail-closed state, 0 for the others: fail-closed, restart-pending (the runtime's config is set up but changed after the runtime started: restart it), fail-open, unverified (the running runtime was not seen). See nri-cni status.",
	}, []string{"state"})
	m.awaitHook = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nri_cni_await_hook_runnable",
		Help: "With the await hook on (failClosed.hookSocket): 1 while its binary (failClosed.hookPath, on the node) is an executable file, else 0 (containers then wait in CreateContainer, and /readyz fails).",
	}, []string{"path"})
	m.draCheckpoint = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nri_cni_dra_checkpoint_unreadable",
		Help: "1 while nri-cni's DRA driver cannot read the kubelet's DRA checkpoint, for the reason (missing, permission, version, checksum, corrupt, read-error), else 0: a lost prepared-claim record is then detected only for pods nri-cni attached before (nri-cni status lists what is held back).",
	}, []string{"reason"})
	m.nadDropped = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nri_cni_nad_cache_dropped",
		Help: "NetworkAttachmentDefinitions whose content this node's NAD cache does not hold now, because kubernetes.maxNADCacheBytes is used up (pods naming them fail) or while one is read back after the budget freed up.",
	})
	m.reg.MustRegister(m.draUnpublished, m.nodeState, m.awaitHook, m.draCheckpoint, m.nadDropped)
	m.mnp = newMNPMetrics()
	m.reg.MustRegister(m.mnp.collectors()...)
	return m
}

// SetNodeState records the node's fail-closed state (one of states) in
// nri_cni_node_fail_closed_state, and in nri_cni_node_fail_open: 0 only
// for "fail-closed" and "unverified" (the files are set up; what the
// gauge always said).
func (m *Metrics) SetNodeState(state string, states []string) {
	for _, s := range states {
		v := 0.0
		if s == state {
			v = 1
		}
		m.nodeState.WithLabelValues(s).Set(v)
	}
	m.SetNodeFailOpen(state != "fail-closed" && state != "unverified")
}

// SetAwaitHook records whether the await hook's binary at path can run.
func (m *Metrics) SetAwaitHook(path string, runnable bool) {
	m.awaitHook.Reset()
	v := 0.0
	if runnable {
		v = 1
	}
	m.awaitHook.WithLabelValues(path).Set(v)
}

// Op records one CNI operation.
func (m *Metrics) Op(op, network, result string, d time.Duration) {
	m.ops.WithLabelValues(op, network, result).Inc()
	m.duration.WithLabelValues(op, network).Observe(d.Seconds())
}

// NetworkReady records a network's readiness (CNI STATUS).
func (m *Metrics) NetworkReady(network string, ready bool) {
	v := 0.0
	if ready {
		v = 1
	}
	m.ready.WithLabelValues(network).Set(v)
}

// CheckFailed counts a failed CNI CHECK.
func (m *Metrics) CheckFailed(network string) { m.checks.WithLabelValues(network).Inc() }

// StartedWithoutNetworks counts containers that ran before their pod's
// networks were attached.
func (m *Metrics) StartedWithoutNetworks(containers int) { m.started.Add(float64(containers)) }

// UnprotectedPod counts a pod given networks that does not require nri-cni.
func (m *Metrics) UnprotectedPod() { m.unprot.Inc() }

// SetNodeFailOpen records whether the node's runtime lets a pod's
// containers start while nri-cni is away.
func (m *Metrics) SetNodeFailOpen(open bool) {
	if open {
		m.failOpen.Set(1)
	} else {
		m.failOpen.Set(0)
	}
}

// SetReadiness sets what /readyz answers: ready, and why not (or a
// summary). Unset, /readyz follows the connection, as /healthz.
func (m *Metrics) SetReadiness(f func() (ready bool, detail string)) { m.readiness.Store(&f) }

// SetConnected records the runtime connection state.
func (m *Metrics) SetConnected(up bool) {
	m.isUp.Store(up)
	if up {
		m.connected.Set(1)
	} else {
		m.connected.Set(0)
	}
}

// Handler serves /metrics, /healthz (200 while connected, else 503: the
// liveness probe) and /readyz (200 while serving: connected, synchronized
// with the runtime and, in Kubernetes mode, its NAD cache synced; else 503
// with the reason: the readiness probe).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.isUp.Load() {
			http.Error(w, "not connected to the runtime", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, detail := m.isUp.Load(), "not connected to the runtime"
		if ready {
			detail = "connected to the runtime"
		}
		if f := m.readiness.Load(); f != nil {
			ready, detail = (*f)()
		}
		if !ready {
			http.Error(w, detail, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(detail + "\n"))
	})
	return mux
}

// Serve listens on addr until ctx ends. The listener is bound before Serve
// returns its first error, so a bad address fails at start.
func Serve(ctx context.Context, addr string, m *Metrics) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener closed under us; nothing to report to
		}
	}()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return func() { _ = srv.Close() }, nil
}

// newDRAUnpublished is the gauge of the networks the DRA driver leaves out.
func newDRAUnpublished() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nri_cni_dra_unpublished",
		Help: "Networks the DRA driver does not publish in this node's ResourceSlice now, by reason (refused, api-limits, duplicate, namespace-share, max-devices, no-addresses, cannot-attach, check-pending).",
	}, []string{"reason"})
}

// SetDRAUnpublished records the networks the DRA driver left out of the
// node's ResourceSlice at its last refresh, by reason (kube.DRAObserver).
func (m *Metrics) SetDRAUnpublished(byReason map[string]int) {
	m.draUnpublished.Reset() // a reason no longer seen goes to 0, not its last value
	for reason, n := range byReason {
		m.draUnpublished.WithLabelValues(reason).Set(float64(n))
	}
}

// SetDRACheckpointUnreadable records whether the kubelet's DRA checkpoint
// cannot be read, by reason (kube.DRAObserver).
func (m *Metrics) SetDRACheckpointUnreadable(byReason map[string]bool) {
	for reason, unreadable := range byReason {
		v := 0.0
		if unreadable {
			v = 1
		}
		m.draCheckpoint.WithLabelValues(reason).Set(v)
	}
}

// SetNADCacheDropped records how many NADs the NAD cache holds no content
// of now (kube.NADCacheObserver).
func (m *Metrics) SetNADCacheDropped(n int) { m.nadDropped.Set(float64(n)) }
