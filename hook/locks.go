package hook

import "sync"

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

// size reports how many keys are held or waited for (tests).
func (k *keyedLocks) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}
