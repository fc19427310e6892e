// Package fleet simulates a fleet of Kubernetes nodes, each running
// nri-cni's Kubernetes-mode code (kube/, kube/dra/, the NRI plugin's
// handlers and the attachment engine) under its own node name and
// node-bound ServiceAccount token, in one process, against one real API
// server (test/cluster), and measures what the fleet costs the API server:
// requests by verb and resource, bytes received, watches held, the API
// server's CPU and memory, a restart of every agent at once. Pods are bound
// to the simulated nodes and never run; attach events are the NRI plugin's
// handlers called in-process over a no-op CNI chain. It also issues Multus
// thick's per-pod request pattern (the pattern, not Multus's code) for
// comparison. make bench's fleet section runs it (test/bench/fleet.go).
package fleet

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Verbs a request is counted under (the API server's names, and WATCHLIST:
// a watch that streams the initial list, sendInitialEvents=true, which an
// informer makes instead of a LIST when watch-list is on).
const (
	VerbGet       = "GET"
	VerbList      = "LIST"
	VerbWatch     = "WATCH"
	VerbWatchList = "WATCHLIST"
	VerbCreate    = "CREATE"
	VerbDryRun    = "CREATE-DRYRUN" // nothing stored
	VerbUpdate    = "UPDATE"
	VerbPatch     = "PATCH"
	VerbDelete    = "DELETE"
	VerbDeleteAll = "DELETECOLLECTION"
)

// Key is what a request is counted by: its verb and resource (with the
// subresource: "pods/status").
type Key struct {
	Verb, Resource string
}

// Stat is what was counted for one key.
type Stat struct {
	Requests int64
	// Errors are responses with a status >= 400 (Throttled: 429, the API
	// server's priority and fairness turning it away), and transport
	// errors.
	Errors, Throttled int64
	// Bytes are the response bodies read (decompressed; a watch's grow as
	// its events arrive).
	Bytes int64
}

type cell struct{ requests, errors, throttled, bytes atomic.Int64 }

// Counter counts one client's requests by Key, the bytes of their
// responses and the watches it holds open: a RoundTripper wrapper for a
// rest.Config's transport.
type Counter struct {
	mu    sync.Mutex // guards cells
	cells map[Key]*cell
	open  atomic.Int64 // watches whose response body is not closed
}

// NewCounter returns an empty counter.
func NewCounter() *Counter { return &Counter{cells: map[Key]*cell{}} }

func (c *Counter) cell(k Key) *cell {
	c.mu.Lock()
	defer c.mu.Unlock()
	x, ok := c.cells[k]
	if !ok {
		x = &cell{}
		c.cells[k] = x
	}
	return x
}

// Wrap returns rt counting through c.
func (c *Counter) Wrap(rt http.RoundTripper) http.RoundTripper { return &countingRT{c: c, rt: rt} }

type countingRT struct {
	c  *Counter
	rt http.RoundTripper
}

func (t *countingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	k := Classify(req)
	x := t.c.cell(k)
	x.requests.Add(1)
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		x.errors.Add(1)
		return resp, err
	}
	if resp.StatusCode >= 400 {
		x.errors.Add(1)
		if resp.StatusCode == http.StatusTooManyRequests {
			x.throttled.Add(1)
		}
	}
	watch := (k.Verb == VerbWatch || k.Verb == VerbWatchList) && resp.StatusCode < 300
	if watch {
		t.c.open.Add(1)
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, x: x, open: &t.c.open, watch: watch}
	return resp, nil
}

// countingBody counts what is read and, for a watch, closes it once.
type countingBody struct {
	io.ReadCloser
	x      *cell
	open   *atomic.Int64
	watch  bool
	closed atomic.Bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.x.bytes.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error {
	if b.watch && b.closed.CompareAndSwap(false, true) {
		b.open.Add(-1)
	}
	return b.ReadCloser.Close()
}

// Classify names a request's verb and resource as the API server does
// (its RequestInfo), from the method, path and query; a path outside
// /api and /apis is its own resource with verb GET.
func Classify(req *http.Request) Key {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:] // api, version
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:] // apis, group, version
	default:
		return Key{Verb: VerbGet, Resource: req.URL.Path}
	}
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		parts = parts[2:] // a namespaced resource (not a namespace's own subresource)
	}
	var resource, name string
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	q := req.URL.Query()
	verb := req.Method
	switch req.Method {
	case http.MethodGet:
		switch {
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			verb = VerbWatch
			if q.Get("sendInitialEvents") == "true" {
				verb = VerbWatchList
			}
		case name == "":
			verb = VerbList
		default:
			verb = VerbGet
		}
	case http.MethodPost:
		verb = VerbCreate
		if q.Get("dryRun") != "" {
			verb = VerbDryRun
		}
	case http.MethodPut:
		verb = VerbUpdate
	case http.MethodPatch:
		verb = VerbPatch
	case http.MethodDelete:
		verb = VerbDelete
		if name == "" {
			verb = VerbDeleteAll
		}
	}
	return Key{Verb: verb, Resource: resource}
}

// Snapshot is a counter's totals at one moment.
type Snapshot struct {
	Stats map[Key]Stat
	// OpenWatches are the watches held at that moment.
	OpenWatches int64
}

// Snapshot returns the totals so far.
func (c *Counter) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{Stats: make(map[Key]Stat, len(c.cells)), OpenWatches: c.open.Load()}
	for k, x := range c.cells {
		s.Stats[k] = Stat{Requests: x.requests.Load(), Errors: x.errors.Load(), Throttled: x.throttled.Load(), Bytes: x.bytes.Load()}
	}
	return s
}

// Sub is what was counted between prev and s (OpenWatches: s's).
func (s Snapshot) Sub(prev Snapshot) Snapshot {
	out := Snapshot{Stats: map[Key]Stat{}, OpenWatches: s.OpenWatches}
	for k, v := range s.Stats {
		p := prev.Stats[k]
		d := Stat{Requests: v.Requests - p.Requests, Errors: v.Errors - p.Errors, Throttled: v.Throttled - p.Throttled, Bytes: v.Bytes - p.Bytes}
		if d != (Stat{}) {
			out.Stats[k] = d
		}
	}
	return out
}

// Plus is s and o summed (many clients' counts).
func (s Snapshot) Plus(o Snapshot) Snapshot {
	out := Snapshot{Stats: make(map[Key]Stat, len(s.Stats)), OpenWatches: s.OpenWatches + o.OpenWatches}
	for k, v := range s.Stats {
		out.Stats[k] = v
	}
	for k, v := range o.Stats {
		p := out.Stats[k]
		out.Stats[k] = Stat{Requests: p.Requests + v.Requests, Errors: p.Errors + v.Errors, Throttled: p.Throttled + v.Throttled, Bytes: p.Bytes + v.Bytes}
	}
	return out
}

// Sum is the total of the keys match accepts (nil: all).
func (s Snapshot) Sum(match func(Key) bool) Stat {
	var t Stat
	for k, v := range s.Stats {
		if match == nil || match(k) {
			t.Requests += v.Requests
			t.Errors += v.Errors
			t.Throttled += v.Throttled
			t.Bytes += v.Bytes
		}
	}
	return t
}

// IsWrite: the request changes stored state (a dry run does not).
func IsWrite(k Key) bool {
	switch k.Verb {
	case VerbCreate, VerbUpdate, VerbPatch, VerbDelete, VerbDeleteAll:
		return true
	}
	return false
}

// IsInitialList: the request lists a collection in full (a LIST, or a
// watch streaming the initial list).
func IsInitialList(k Key) bool { return k.Verb == VerbList || k.Verb == VerbWatchList }

// OfResource matches one resource (with its subresource, if given).
func OfResource(resource string) func(Key) bool {
	return func(k Key) bool { return k.Resource == resource }
}
