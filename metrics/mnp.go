package metrics

// MultiNetworkPolicy's metrics (kube/mnp.Observer).

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// mnpMetrics are registered by New beside the others.
type mnpMetrics struct {
	propagation   prometheus.Histogram
	invalid       prometheus.Gauge
	queueDepth    prometheus.Gauge
	eventsDropped prometheus.Counter
}

func newMNPMetrics() *mnpMetrics {
	return &mnpMetrics{
		propagation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nri_cni_mnp_propagation_seconds",
			Help:    "Time from a change nri-cni's MultiNetworkPolicy caches saw (a policy, a namespace's or a pod's labels, a peer's IPs) to an affected local pod's rules applied.",
			Buckets: []float64{.05, .1, .15, .25, .5, .75, 1, 2, 5, 10, 30},
		}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nri_cni_mnp_invalid_policies",
			Help: "MultiNetworkPolicies with an invalid part or past a cap at their current generation (they allow nothing there; a Warning Event names each).",
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nri_cni_mnp_queue_depth",
			Help: "Local pods waiting for their MultiNetworkPolicy rules to be re-rendered and applied.",
		}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nri_cni_mnp_events_dropped_total",
			Help: "MultiNetworkPolicy Warning Events this node did not raise because of its rate limit (10 at once, then one per 30 s).",
		}),
	}
}

func (m *mnpMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.propagation, m.invalid, m.queueDepth, m.eventsDropped}
}

// ObserveMNPPropagation records one change's propagation to a pod.
func (m *Metrics) ObserveMNPPropagation(d time.Duration) { m.mnp.propagation.Observe(d.Seconds()) }

// SetMNPQueueDepth records the dirty queue's length.
func (m *Metrics) SetMNPQueueDepth(n int) { m.mnp.queueDepth.Set(float64(n)) }

// SetMNPInvalidPolicies records the policies noted invalid or oversize.
func (m *Metrics) SetMNPInvalidPolicies(n int) { m.mnp.invalid.Set(float64(n)) }

// MNPEventDropped counts an Event the rate limit dropped.
func (m *Metrics) MNPEventDropped() { m.mnp.eventsDropped.Inc() }
