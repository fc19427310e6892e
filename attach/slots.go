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
	key     string
	ready   chan struct{}
	granted bool
	// urgent: its pod's container waits for it (the await hook) and would
	// fail to start if it waited longer; rescued: granted beside the slots.
	urgent, rescued bool
}

// slots hands out the background attach slots. Its lock is held only to
// queue, grant or release, never while an attach runs.
//
// Rescue: the slots bound the node's CNI work, but a container whose pod's
// attach waits for a slot must not fail to start because other namespaces
// keep them busy (a container the await hook holds fails its start at the
// hook's deadline, and a pod with restartPolicy Never fails for good). A
// waiter marked urgent (rescue) whose namespace holds no slot runs at
// once, beside the slots: one per namespace at a time, so a namespace
// delays its own pods, never another's past the rescue.
type slots struct {
	mu      sync.Mutex
	total   int            // slots, node-wide
	share   int            // the most one key holds at once
	busy    int            // slots held
	running map[string]int // slots (and rescues) held per key
	rescues int            // attaches running beside the slots
	waiting RoundRobin[*slotWaiter]
	urgent  []*slotWaiter // waiters marked urgent, still waiting
}

func newSlots(total, share int) *slots {
	return &slots{total: total, share: share, running: map[string]int{}}
}

// acquire waits for a slot for key, at most maxWait (ErrNoAttachSlot,
// saying how busy the slots were) or until ctx ends (its cause). When
// rescue is closed the waiter becomes urgent (see slots) and maxWait no
// longer applies: whoever closed it bounds the wait. release gives the
// slot back; call it exactly once. rescued: granted beside the slots.
func (s *slots) acquire(ctx context.Context, key string, maxWait time.Duration, rescue <-chan struct{}) (release func(), rescued bool, err error) {
	w := &slotWaiter{key: key, ready: make(chan struct{})}
	s.mu.Lock()
	s.waiting.Push(key, w)
	s.grantLocked()
	s.mu.Unlock()
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	timeout := timer.C
wait:
	for {
		select {
		case <-w.ready:
			return s.releaser(w), w.rescued, nil
		case <-ctx.Done():
			err = context.Cause(ctx)
			break wait
		case <-rescue:
			rescue, timeout = nil, nil
			s.mu.Lock()
			if !w.granted {
				w.urgent = true
				s.urgent = append(s.urgent, w)
				s.grantLocked()
			}
			s.mu.Unlock()
		case <-timeout:
			break wait
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted { // granted as we gave up
		if ctx.Err() == nil {
			return s.releaser(w), w.rescued, nil
		}
		s.releaseLocked(w)
		return nil, false, err
	}
	s.waiting.Remove(key, w)
	s.dropUrgentLocked(w)
	if err == nil {
		err = fmt.Errorf("%w: waited %s; %s", ErrNoAttachSlot, maxWait, s.describeLocked(key))
	}
	return nil, false, err
}

// grantLocked hands the free slots to the waiters, taking the keys in
// turn and passing over those holding their share; then it rescues the
// urgent waiters whose key holds nothing.
func (s *slots) grantLocked() {
	for s.busy < s.total {
		w, key, ok := s.waiting.Pop(func(k string) bool { return s.running[k] < s.share })
		if !ok {
			break
		}
		s.busy++
		s.running[key]++
		w.granted = true
		s.dropUrgentLocked(w)
		close(w.ready)
	}
	for i := 0; i < len(s.urgent); {
		w := s.urgent[i]
		if s.running[w.key] > 0 {
			i++
			continue
		}
		s.waiting.Remove(w.key, w)
		s.urgent = append(s.urgent[:i], s.urgent[i+1:]...)
		s.rescues++
		s.running[w.key]++
		w.granted, w.rescued = true, true
		close(w.ready)
	}
}

// dropUrgentLocked forgets w as urgent (granted, or given up).
func (s *slots) dropUrgentLocked(w *slotWaiter) {
	if !w.urgent {
		return
	}
	for i, u := range s.urgent {
		if u == w {
			s.urgent = append(s.urgent[:i], s.urgent[i+1:]...)
			return
		}
	}
}

func (s *slots) releaser(w *slotWaiter) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.releaseLocked(w)
		})
	}
}

func (s *slots) releaseLocked(w *slotWaiter) {
	if w.rescued {
		s.rescues--
	} else {
		s.busy--
	}
	if s.running[w.key]--; s.running[w.key] <= 0 {
		delete(s.running, w.key)
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
	Rescued      int // attaches running beside the slots (rescued)
	Waiting      int // attaches waiting for one
	Namespaces   int // namespaces with attaches waiting
}

func (s *slots) stats() BackgroundStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return BackgroundStats{Slots: s.total, Share: s.share, Running: s.busy, Rescued: s.rescues, Waiting: s.waiting.Len(),
		Namespaces: s.waiting.Keys()}
}

// runningIn is how many slots key holds (tests).
func (s *slots) runningIn(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[key]
}
