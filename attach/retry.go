package attach

import (
	"sync"
	"time"
)

// Teardown retries. A teardown that fails (a DEL that keeps failing: a broken
// plugin, a daemon away) must neither leak the address nor block the pod's
// deletion. So the runtime's Stop/Remove request is answered with success (CRI-O
// hands a Stop error back to the kubelet, which would retry Stop forever), the
// record is kept, and the teardown is retried here in the background with
// exponential backoff until it succeeds. The record is on disk: after a restart
// the resync and the netns sweep find it again.

// Backoff bounds of teardown retries.
const (
	// RetryBase is also how often due retries are looked for.
	RetryBase = time.Second
	retryMax  = 5 * time.Minute
)

type retry struct {
	sb       Sandbox
	final    bool // drop the record once torn down
	attempts int
	next     time.Time
}

// retries are the pending teardowns, by sandbox id. Its own lock; never held
// across CNI calls.
type retries struct {
	mu      sync.Mutex
	pending map[string]*retry
}

// failed schedules (or reschedules, with a doubled delay) sb's teardown.
func (r *retries) failed(sb Sandbox, final bool, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[string]*retry{}
	}
	p := r.pending[sb.ID]
	if p == nil {
		p = &retry{sb: sb}
		r.pending[sb.ID] = p
	}
	p.final = p.final || final
	delay := RetryBase << min(p.attempts, 16)
	if delay > retryMax {
		delay = retryMax
	}
	p.attempts++
	p.next = now.Add(delay)
	return delay
}

func (r *retries) done(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, id)
}

// due returns the retries whose time has come.
func (r *retries) due(now time.Time) []retry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []retry
	for _, p := range r.pending {
		if !now.Before(p.next) {
			out = append(out, *p)
		}
	}
	return out
}

func (r *retries) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}
