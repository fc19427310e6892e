package attach

// The background attaches' slots: a fixed number of attaches run at once,
// node-wide; those waiting take the slots that come free in the order of
// RoundRobin, keyed by the pod's namespace, and no namespace holds more than
// its share of the slots while others' attaches wait or may come. So a
// namespace queueing many slow attaches (each kubelet retry of a failing
// pod queues one more) delays its own pods, not the others': another
// namespace's attach takes the slot kept free of it at once, or, when
// several namespaces fill the slots, one of the next slots to come free.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNoAttachSlot: a background attach waited for a slot longer than its
// bound (BackgroundQueueWait) and was given up; nothing was attempted. The
// runtime's caller retries (the kubelet retries CreateContainer).
var ErrNoAttachSlot = errors.New("no background attach slot came free in time")

// slotWaiter is one attach waiting for a slot; ready is closed when it
// gets one (granted set first, under the slots' lock).
type slotWaiter struct {
	ready   chan struct{}
	granted bool
}

// slots hands out the background attach slots. Its lock is held only to
// queue, grant or release, never while an attach runs.
type slots struct {
	mu      sync.Mutex
	total   int            // slots, node-wide
	share   int            // the most one key holds at once
	busy    int            // slots held
	running map[string]int // slots held per key
	waiting RoundRobin[*slotWaiter]
}

func newSlots(total, share int) *slots {
	return &slots{total: total, share: share, running: map[string]int{}}
}

// acquire waits for a slot for key, at most maxWait (ErrNoAttachSlot,
// saying how busy the slots were) or until ctx ends (its cause). release
// gives the slot back; call it exactly once.
func (s *slots) acquire(ctx context.Context, key string, maxWait time.Duration) (release func(), err error) {
	w := &slotWaiter{ready: make(chan struct{})}
	s.mu.Lock()
	s.waiting.Push(key, w)
	s.grantLocked()
	s.mu.Unlock()
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return s.releaser(key), nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-timer.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted { // granted as we gave up
		if ctx.Err() == nil {
			return s.releaser(key), nil
		}
		s.releaseLocked(key)
		return nil, err
	}
	s.waiting.Remove(key, w)
	if err == nil {
		err = fmt.Errorf("%w: waited %s; %s", ErrNoAttachSlot, maxWait, s.describeLocked(key))
	}
	return nil, err
}

// grantLocked hands the free slots to the waiters, taking the keys in
// turn and passing over those holding their share.
func (s *slots) grantLocked() {
	for s.busy < s.total {
		w, key, ok := s.waiting.Pop(func(k string) bool { return s.running[k] < s.share })
		if !ok {
			return
		}
		s.busy++
		s.running[key]++
		w.granted = true
		close(w.ready)
	}
}

func (s *slots) releaser(key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.releaseLocked(key)
		})
	}
}

func (s *slots) releaseLocked(key string) {
	s.busy--
	if s.running[key]--; s.running[key] <= 0 {
		delete(s.running, key)
	}
	s.grantLocked()
}

// describeLocked says how busy the slots are, for key's error.
func (s *slots) describeLocked(key string) string {
	return fmt.Sprintf("%d of the node's %d attach slots busy, %d attaches of %d namespaces waiting "+
		"(namespace %q: %d running, %d waiting; at most %d at once)",
		s.busy, s.total, s.waiting.Len(), s.waiting.Keys(), key, s.running[key], s.waiting.Waiting(key), s.share)
}

// BackgroundStats is a snapshot of the background attaches' slots.
type BackgroundStats struct {
	Slots, Share int // the node's slots, and the most one namespace holds
	Running      int // attaches holding a slot
	Waiting      int // attaches waiting for one
	Namespaces   int // namespaces with attaches waiting
}

func (s *slots) stats() BackgroundStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return BackgroundStats{Slots: s.total, Share: s.share, Running: s.busy, Waiting: s.waiting.Len(), Namespaces: s.waiting.Keys()}
}

// runningIn is how many slots key holds (tests).
func (s *slots) runningIn(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[key]
}
