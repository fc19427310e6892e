package attach

// Fair shares of the node's background work. One tenant (a namespace) must
// not keep the others' pods waiting behind its own: a namespace's work is
// queued in a FIFO of its own, and the next job is taken from the
// namespaces in turn. Background attaches (background.go) take their slots
// in this order; hot-plug (kube.PodWatcher) takes pods in it.

// RoundRobin holds items in one FIFO per key (a namespace) and hands them
// out one key at a time, in turn: FIFO within a key, round robin across
// keys. An item pushed under a key that has none waiting comes out after
// at most one item of each other key waiting, however many those have.
// The zero value is empty and ready; it is not safe for concurrent use.
type RoundRobin[T comparable] struct {
	fifo map[string][]T
	ring []string // the keys with items, in turn
	next int      // index in ring of the key served next
	n    int      // items held
}

// Push queues item at the end of key's FIFO; a key new to the ring is
// served after those already waiting.
func (r *RoundRobin[T]) Push(key string, item T) {
	if r.fifo == nil {
		r.fifo = map[string][]T{}
	}
	if len(r.fifo[key]) == 0 {
		r.ring = append(r.ring, key)
	}
	r.fifo[key] = append(r.fifo[key], item)
	r.n++
}

// Len is the number of items held.
func (r *RoundRobin[T]) Len() int { return r.n }

// Keys is the number of keys with items.
func (r *RoundRobin[T]) Keys() int { return len(r.ring) }

// Waiting is the number of key's items.
func (r *RoundRobin[T]) Waiting(key string) int { return len(r.fifo[key]) }

// Pop takes the first item of the next key in turn for which eligible is
// true (nil: every key); a key passed over keeps its turn. found is false
// when no key is eligible.
func (r *RoundRobin[T]) Pop(eligible func(key string) bool) (item T, key string, found bool) {
	for k := range len(r.ring) {
		i := (r.next + k) % len(r.ring)
		key = r.ring[i]
		if eligible != nil && !eligible(key) {
			continue
		}
		q := r.fifo[key]
		item = q[0]
		var zero T
		q[0] = zero
		r.n--
		if len(q) == 1 {
			delete(r.fifo, key)
			r.next = i // the key after it takes the turn
			r.dropKey(i)
		} else {
			r.fifo[key] = q[1:]
			r.next = (i + 1) % len(r.ring)
		}
		return item, key, true
	}
	var zero T
	return zero, "", false
}

// Remove drops item from key's FIFO (an item given up on); false when it
// was not there.
func (r *RoundRobin[T]) Remove(key string, item T) bool {
	q := r.fifo[key]
	for j, it := range q {
		if it != item {
			continue
		}
		r.n--
		if len(q) == 1 {
			delete(r.fifo, key)
			for i, k := range r.ring {
				if k == key {
					r.dropKey(i)
					break
				}
			}
			return true
		}
		r.fifo[key] = append(q[:j:j], q[j+1:]...)
		return true
	}
	return false
}

// dropKey removes ring[i], keeping the turn with the key that followed it.
func (r *RoundRobin[T]) dropKey(i int) {
	r.ring = append(r.ring[:i], r.ring[i+1:]...)
	if i < r.next {
		r.next--
	}
	if r.next >= len(r.ring) {
		r.next = 0
	}
}
