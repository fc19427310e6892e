package fleet

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        Key
	}{
		{"GET", "/api/v1/namespaces/a/pods/p", Key{VerbGet, "pods"}},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500", Key{VerbList, "pods"}},
		{"GET", "/api/v1/namespaces/a/pods", Key{VerbList, "pods"}},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=5", Key{VerbWatch, "pods"}},
		{"GET", "/api/v1/pods?allowWatchBookmarks=true&sendInitialEvents=true&watch=true", Key{VerbWatchList, "pods"}},
		{"PATCH", "/api/v1/namespaces/a/pods/p", Key{VerbPatch, "pods"}},
		{"PUT", "/api/v1/namespaces/a/pods/p/status", Key{VerbUpdate, "pods/status"}},
		{"POST", "/api/v1/namespaces/a/events", Key{VerbCreate, "events"}},
		{"GET", "/api/v1/nodes/n1", Key{VerbGet, "nodes"}},
		{"GET", "/api/v1/namespaces/a", Key{VerbGet, "namespaces"}},
		{"PUT", "/api/v1/namespaces/a/status", Key{VerbUpdate, "namespaces/status"}},
		{"GET", "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions?watch=1", Key{VerbWatch, "network-attachment-definitions"}},
		{"POST", "/apis/resource.k8s.io/v1/resourceslices?dryRun=All", Key{VerbDryRun, "resourceslices"}},
		{"PUT", "/apis/resource.k8s.io/v1/resourceslices/s1", Key{VerbUpdate, "resourceslices"}},
		{"DELETE", "/apis/resource.k8s.io/v1/resourceslices/s1", Key{VerbDelete, "resourceslices"}},
		{"DELETE", "/apis/resource.k8s.io/v1/resourceslices", Key{VerbDeleteAll, "resourceslices"}},
		{"PATCH", "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c/status", Key{VerbPatch, "resourceclaims/status"}},
		{"GET", "/metrics", Key{VerbGet, "/metrics"}},
	} {
		req, err := http.NewRequest(tc.method, "https://h"+tc.url, nil)
		require.NoError(t, err)
		assert.Equal(t, tc.want, Classify(req), "%s %s", tc.method, tc.url)
	}
}

// The counter counts requests by key, response bytes as they are read,
// errors and 429s, and the watches whose bodies are open.
func TestCounter(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("watch") == "true":
			_, _ = io.WriteString(w, "event-1\n")
			w.(http.Flusher).Flush()
			<-release
		case r.Method == http.MethodPatch:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			_, _ = io.WriteString(w, strings.Repeat("x", 100))
		}
	}))
	defer srv.Close()
	c := NewCounter()
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	do := func(method, path string) *http.Response {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		return resp
	}
	for range 2 {
		resp := do("GET", "/api/v1/namespaces/a/pods/p")
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	before := c.Snapshot()
	resp := do("PATCH", "/api/v1/namespaces/a/pods/p")
	resp.Body.Close()
	w := do("GET", "/api/v1/pods?watch=true")
	line := make([]byte, 8)
	_, err := io.ReadFull(w.Body, line)
	require.NoError(t, err)
	during := c.Snapshot()
	assert.Equal(t, int64(1), during.OpenWatches)
	close(release)
	w.Body.Close()
	w.Body.Close() // twice: counted once
	after := c.Snapshot()
	assert.Equal(t, int64(0), after.OpenWatches)

	assert.Equal(t, Stat{Requests: 2, Bytes: 200}, after.Stats[Key{VerbGet, "pods"}])
	assert.Equal(t, Stat{Requests: 1, Errors: 1, Throttled: 1}, after.Stats[Key{VerbPatch, "pods"}])
	assert.Equal(t, Stat{Requests: 1, Bytes: 8}, after.Stats[Key{VerbWatch, "pods"}])

	d := during.Sub(before)
	assert.Len(t, d.Stats, 2, "the GETs happened before")
	assert.Equal(t, int64(1), d.Sum(IsWrite).Requests)
	assert.Equal(t, int64(4), after.Sum(OfResource("pods")).Requests, "2 GETs, the PATCH, the watch")
	total := after.Plus(after)
	assert.Equal(t, int64(8), total.Sum(nil).Requests)
	assert.Equal(t, int64(416), total.Sum(nil).Bytes)
}

func TestParseMetric(t *testing.T) {
	name, labels, v, ok := parseMetric(`apiserver_flowcontrol_rejected_requests_total{flow_schema="kube-system-service-accounts",priority_level="workload-high",reason="queue-full"} 12`)
	require.True(t, ok)
	assert.Equal(t, "apiserver_flowcontrol_rejected_requests_total", name)
	assert.Equal(t, 12.0, v)
	assert.Equal(t, "workload-high", label(labels, "priority_level"))
	assert.Equal(t, "", label(labels, "nope"))
	_, _, v, ok = parseMetric("process_cpu_seconds_total 3.5")
	assert.True(t, ok)
	assert.Equal(t, 3.5, v)
	_, _, _, ok = parseMetric("# HELP x y")
	assert.False(t, ok)
}
