package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

func TestMetricsAndHealth(t *testing.T) {
	m := New(func() float64 { return 3 }, func() float64 { return 2 })
	h := m.Handler()
	if code, _ := get(t, h, "/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("healthz before connecting = %d, want 503", code)
	}
	m.SetConnected(true)
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz when connected = %d, want 200", code)
	}
	m.Op("add", "sec", "ok", 20*time.Millisecond)
	m.Op("add", "sec", "error", time.Second)
	_, body := get(t, h, "/metrics")
	for _, want := range []string{
		`nri_cni_operations_total{network="sec",op="add",result="ok"} 1`,
		`nri_cni_operations_total{network="sec",op="add",result="error"} 1`,
		`nri_cni_operation_duration_seconds_count{network="sec",op="add"} 2`,
		`nri_cni_attachments 3`,
		`nri_cni_pending_teardowns 2`,
		`nri_cni_runtime_connected 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	m.SetConnected(false)
	if code, _ := get(t, h, "/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("healthz after disconnect = %d, want 503", code)
	}
}

func TestReadinessAndDriftMetrics(t *testing.T) {
	m := New(func() float64 { return 0 }, func() float64 { return 0 })
	m.SetConnected(true)
	m.NetworkReady("pool", false)
	m.NetworkReady("sec", true)
	m.CheckFailed("sec")
	m.CheckFailed("sec")
	h := m.Handler()
	_, body := get(t, h, "/metrics")
	for _, want := range []string{
		`nri_cni_network_ready{network="pool"} 0`,
		`nri_cni_network_ready{network="sec"} 1`,
		`nri_cni_check_failures_total{network="sec"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// A network that is not ready is not nri-cni being unhealthy.
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Errorf("healthz with a network not ready = %d, want 200", code)
	}
}

func TestReadyz(t *testing.T) {
	m := New(func() float64 { return 0 }, func() float64 { return 0 })
	h := m.Handler()
	// Unset: follows the connection.
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before connecting = %d, want 503", code)
	}
	m.SetConnected(true)
	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz when connected (no readiness set) = %d, want 200", code)
	}
	ready, why := false, "connected; synchronizing with the runtime"
	m.SetReadiness(func() (bool, string) { return ready, why })
	code, body := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "synchronizing") {
		t.Fatalf("readyz while synchronizing = %d %q, want 503 naming why", code, body)
	}
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz is about the connection only: %d", code)
	}
	ready, why = true, "serving"
	if code, body := get(t, h, "/readyz"); code != http.StatusOK || body != "serving\n" {
		t.Fatalf("readyz when serving = %d %q", code, body)
	}
	m.StartedWithoutNetworks(2)
	m.SetNodeFailOpen(true)
	m.UnprotectedPod()
	_, body = get(t, h, "/metrics")
	for _, want := range []string{"nri_cni_started_without_networks_total 2", "nri_cni_node_fail_open 1", "nri_cni_unprotected_pods_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Each refresh replaces the DRA gauge whole: a reason the last refresh did
// not see is gone, not left at its old count.
func TestDRAUnpublishedIsReplaced(t *testing.T) {
	m := New(func() float64 { return 0 }, func() float64 { return 0 })
	h := m.Handler()
	m.SetDRAUnpublished(map[string]int{"duplicate": 2, "api-limits": 1})
	_, body := get(t, h, "/metrics")
	for _, want := range []string{`nri_cni_dra_unpublished{reason="duplicate"} 2`, `nri_cni_dra_unpublished{reason="api-limits"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	m.SetDRAUnpublished(map[string]int{"api-limits": 3})
	_, body = get(t, h, "/metrics")
	if !strings.Contains(body, `nri_cni_dra_unpublished{reason="api-limits"} 3`) || strings.Contains(body, `reason="duplicate"`) {
		t.Errorf("after the second refresh:\n%s", body)
	}
}

// The node's state is one-hot over every state; nri_cni_node_fail_open
// keeps its meaning (1 unless the node fails closed or is unverified, i.e.
// also while a restart is pending). The await hook's gauge names its path.
func TestNodeStateAndAwaitHook(t *testing.T) {
	m := New(func() float64 { return 0 }, func() float64 { return 0 })
	h := m.Handler()
	states := []string{"fail-closed", "restart-pending", "fail-open", "unverified"}
	for _, tc := range []struct {
		state    string
		failOpen string
	}{{"restart-pending", "1"}, {"fail-closed", "0"}, {"fail-open", "1"}, {"unverified", "0"}} {
		m.SetNodeState(tc.state, states)
		_, body := get(t, h, "/metrics")
		for _, s := range states {
			want := "0"
			if s == tc.state {
				want = "1"
			}
			if line := `nri_cni_node_fail_closed_state{state="` + s + `"} ` + want; !strings.Contains(body, line) {
				t.Errorf("%s: /metrics lacks %q", tc.state, line)
			}
		}
		if line := "nri_cni_node_fail_open " + tc.failOpen; !strings.Contains(body, line) {
			t.Errorf("%s: /metrics lacks %q", tc.state, line)
		}
	}
	m.SetAwaitHook("/opt/nri-cni/bin/nri-cni", false)
	_, body := get(t, h, "/metrics")
	if !strings.Contains(body, `nri_cni_await_hook_runnable{path="/opt/nri-cni/bin/nri-cni"} 0`) {
		t.Errorf("/metrics lacks the await hook:\n%s", body)
	}
}

// The NAD cache's dropped NADs are a gauge: what is dropped now.
func TestNADCacheDropped(t *testing.T) {
	m := New(func() float64 { return 0 }, func() float64 { return 0 })
	h := m.Handler()
	_, body := get(t, h, "/metrics")
	if !strings.Contains(body, "nri_cni_nad_cache_dropped 0") {
		t.Errorf("/metrics lacks the gauge at 0:\n%s", body)
	}
	m.SetNADCacheDropped(6)
	_, body = get(t, h, "/metrics")
	if !strings.Contains(body, "nri_cni_nad_cache_dropped 6") {
		t.Errorf("/metrics lacks nri_cni_nad_cache_dropped 6")
	}
	m.SetNADCacheDropped(0)
	_, body = get(t, h, "/metrics")
	if !strings.Contains(body, "nri_cni_nad_cache_dropped 0") {
		t.Errorf("/metrics lacks nri_cni_nad_cache_dropped 0 after the NADs came back")
	}
}
