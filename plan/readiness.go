package plan

import "sync"

// Readiness is each network's last CNI STATUS answer: the STATUS
// reconciler writes it, planning reads it (Catalogue.NotReady). The zero
// value says every network is ready. Safe for concurrent use.
type Readiness struct {
	mu       sync.RWMutex // guards notReady
	notReady map[string]error
}

// NotReady returns why network is not ready, nil when it is.
func (r *Readiness) NotReady(network string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.notReady[network]
}

// Set replaces the answers (network → why not ready) and returns the
// previous ones.
func (r *Readiness) Set(notReady map[string]error) (before map[string]error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before, r.notReady = r.notReady, notReady
	return before
}
