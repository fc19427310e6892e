package attach

// Locks. The GC lock is taken (shared) before any sandbox's lock by every
// operation on a sandbox, and exclusively by libcni's GC only, which must not
// overlap any ADD or DEL. Every wait is bounded: by the request's deadline
// (less the margin kept for answering the runtime), and for the background
// loops (netns watcher, teardown retries, GC) by a short wait of their own,
// so one stuck pod never holds up another pod's request or a reconciler.

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// keyedLocks serialises work per sandbox id; different ids proceed in
// parallel. Entries are refcounted and dropped when the last holder leaves.
type keyedLocks struct {
	mu sync.Mutex // guards m; held only to find or drop an entry
	m  map[string]*refLock
}

type refLock struct {
	sync.Mutex
	refs int
}

func newKeyedLocks() *keyedLocks { return &keyedLocks{m: map[string]*refLock{}} }

// Lock blocks until key is free and returns its unlock function, which must
// be called exactly once.
func (k *keyedLocks) Lock(key string) (unlock func()) {
	k.mu.Lock()
	l, ok := k.m[key]
	if !ok {
		l = &refLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()

	l.Lock()
	return k.releaser(key, l)
}

// releaser unlocks l and drops key's entry when its last holder leaves.
func (k *keyedLocks) releaser(key string, l *refLock) func() {
	return func() {
		l.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// TryLock takes key if it is free now, without waiting.
func (k *keyedLocks) TryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	l, exists := k.m[key]
	if !exists {
		l = &refLock{}
		k.m[key] = l
	}
	if !l.TryLock() {
		if !exists {
			delete(k.m, key)
		}
		k.mu.Unlock()
		return nil, false
	}
	l.refs++
	k.mu.Unlock()
	return k.releaser(key, l), true
}

// size reports how many keys are held or waited for (tests).
func (k *keyedLocks) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}

// BackgroundLockWait bounds how long a background loop (netns watcher,
// teardown retries, GC) waits for one sandbox's lock before moving on to
// the others; the busy sandbox is retried later.
const BackgroundLockWait = time.Second

// locks are the GC lock and the per-sandbox locks.
type locks struct {
	gc    sync.RWMutex
	keyed *keyedLocks
}

func newLocks() *locks { return &locks{keyed: newKeyedLocks()} }

// sandbox takes the GC lock (shared) and id's lock, waiting no longer than
// ctx's deadline minus margin, nor than maxWait when > 0 (ErrBusy). A lock
// obtained after giving up is released at once. release unlocks both.
func (l *locks) sandbox(ctx context.Context, id string, maxWait, margin time.Duration) (release func(), err error) {
	wctx := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, d.Add(-margin))
		defer cancel()
	}
	if maxWait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(wctx, maxWait)
		defer cancel()
	}
	if !l.gc.TryRLock() {
		if _, err := waitLock(wctx, func() func() { l.gc.RLock(); return l.gc.RUnlock }); err != nil {
			return nil, fmt.Errorf("%w (waiting for the garbage collection)", ErrBusy)
		}
	}
	unlock, ok := l.keyed.TryLock(id)
	if !ok { // free: taken whatever the time left; else wait
		if unlock, err = waitLock(wctx, func() func() { return l.keyed.Lock(id) }); err != nil {
			l.gc.RUnlock()
			return nil, fmt.Errorf("%w (waiting for another operation on the sandbox)", ErrBusy)
		}
	}
	return func() { unlock(); l.gc.RUnlock() }, nil
}

// exclusive takes the GC lock exclusively, polling for it instead of
// queueing: a queued writer would make every new attach wait behind it
// (sync.RWMutex lets no reader in while a writer waits). release is nil
// when the lock did not come within wait or ctx ended.
func (l *locks) exclusive(ctx context.Context, wait time.Duration) (release func()) {
	deadline := time.Now().Add(wait)
	for {
		if l.gc.TryLock() {
			return l.gc.Unlock
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitLock runs lock, which blocks and returns the release function, and
// waits for it until ctx ends; then the lock is released as soon as it is
// taken. The error is ctx's (callers must not pass it on to the runtime:
// containerd takes a DeadlineExceeded from a plugin as fatal).
func waitLock(ctx context.Context, lock func() (release func())) (func(), error) {
	got := make(chan func(), 1)
	go func() { got <- lock() }()
	select {
	case release := <-got:
		return release, nil
	case <-ctx.Done():
		go func() { (<-got)() }()
		return nil, ctx.Err()
	}
}
