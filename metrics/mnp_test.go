package metrics

import (
	"strings"
	"testing"
	"time"
)

func TestMNPMetrics(t *testing.T) {
	m := New(func() float64 { return 0 }, func() float64 { return 0 })
	m.ObserveMNPPropagation(120 * time.Millisecond)
	m.SetMNPQueueDepth(7)
	m.SetMNPInvalidPolicies(2)
	m.MNPEventDropped()
	_, body := get(t, m.Handler(), "/metrics")
	for _, want := range []string{
		`nri_cni_mnp_propagation_seconds_bucket{le="0.15"} 1`,
		`nri_cni_mnp_propagation_seconds_bucket{le="0.1"} 0`,
		"nri_cni_mnp_queue_depth 7",
		"nri_cni_mnp_invalid_policies 2",
		"nri_cni_mnp_events_dropped_total 1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
