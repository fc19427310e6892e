package attach

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func popAll(r *RoundRobin[string]) []string {
	var out []string
	for {
		it, _, ok := r.Pop(nil)
		if !ok {
			return out
		}
		out = append(out, it)
	}
}

// FIFO within a key, one item of each key in turn across keys.
func TestRoundRobinTakesKeysInTurn(t *testing.T) {
	var r RoundRobin[string]
	for _, it := range []string{"a1", "a2", "a3", "a4"} {
		r.Push("a", it)
	}
	r.Push("b", "b1")
	r.Push("c", "c1")
	r.Push("b", "b2")
	assert.Equal(t, 7, r.Len())
	assert.Equal(t, 3, r.Keys())
	assert.Equal(t, []string{"a1", "b1", "c1", "a2", "b2", "a3", "a4"}, popAll(&r))
	assert.Equal(t, 0, r.Len())
	assert.Equal(t, 0, r.Keys())
}

// A key that arrives behind a long queue is served after at most one item
// of each key already waiting, wherever the turn stands.
func TestRoundRobinNewKeyWaitsOneRoundAtMost(t *testing.T) {
	var r RoundRobin[string]
	for i := range 100 {
		r.Push("hostile", string(rune('A'+i%26)))
	}
	r.Push("other", "o1")
	_, _, _ = r.Pop(nil) // hostile
	_, _, _ = r.Pop(nil) // other's o1
	r.Push("victim", "v1")
	var before int
	for {
		it, key, ok := r.Pop(nil)
		require.True(t, ok)
		if key == "victim" {
			assert.Equal(t, "v1", it)
			break
		}
		before++
	}
	assert.LessOrEqual(t, before, 1, "one item of the one other key waiting, not its 98")
}

// A key passed over (holding its share) keeps its turn; Remove takes an
// item out of the middle and a key out of the ring.
func TestRoundRobinEligibleAndRemove(t *testing.T) {
	var r RoundRobin[string]
	r.Push("a", "a1")
	r.Push("a", "a2")
	r.Push("b", "b1")
	r.Push("b", "b2")
	r.Push("c", "c1")
	it, key, ok := r.Pop(func(k string) bool { return k != "a" })
	require.True(t, ok)
	assert.Equal(t, "b1", it)
	assert.Equal(t, "b", key)
	_, _, ok = r.Pop(func(string) bool { return false })
	assert.False(t, ok)
	assert.True(t, r.Remove("b", "b2"))
	assert.False(t, r.Remove("b", "b2"))
	assert.True(t, r.Remove("a", "a1"))
	assert.Equal(t, 2, r.Len())
	assert.Equal(t, 2, r.Keys())
	assert.Equal(t, []string{"c1", "a2"}, popAll(&r))
}

// acquireAsync asks for a slot in the background; the channel gets the
// release (or the error) once it comes.
func acquireAsync(ctx context.Context, s *slots, key string, maxWait time.Duration) chan func() {
	got := make(chan func(), 1)
	go func() {
		release, _, err := s.acquire(ctx, key, maxWait, nil)
		if err != nil {
			got <- nil
			return
		}
		got <- release
	}()
	return got
}

// drain releases every slot the waiters get, as they get them, until each
// had one; it returns how many did.
func drain(t *testing.T, waiters []chan func()) int {
	t.Helper()
	left := map[chan func()]bool{}
	for _, c := range waiters {
		left[c] = true
	}
	granted := 0
	deadline := time.Now().Add(10 * time.Second)
	for len(left) > 0 {
		require.True(t, time.Now().Before(deadline), "%d waiters never got a slot", len(left))
		for c := range left {
			select {
			case r := <-c:
				delete(left, c)
				if r != nil {
					granted++
					r()
				}
			default:
			}
		}
		time.Sleep(time.Millisecond)
	}
	return granted
}

func waitQueued(t *testing.T, s *slots, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return s.stats().Waiting == n }, 5*time.Second, time.Millisecond)
}

// One namespace never holds every slot: with four slots it holds three,
// and another namespace's attach takes the fourth at once, however many of
// the first one's wait.
func TestSlotsKeepOneForTheOtherNamespaces(t *testing.T) {
	s := newSlots(4, 3)
	ctx := context.Background()
	var hostile []chan func()
	for range 20 {
		hostile = append(hostile, acquireAsync(ctx, s, "hostile", time.Minute))
	}
	waitQueued(t, s, 17)
	assert.Equal(t, 3, s.runningIn("hostile"))
	assert.Equal(t, BackgroundStats{Slots: 4, Share: 3, Running: 3, Waiting: 17, Namespaces: 1}, s.stats())

	release, _, err := s.acquire(ctx, "victim", time.Second, nil)
	require.NoError(t, err, "the slot kept for the others")
	assert.Equal(t, 17, s.stats().Waiting, "no hostile attach went first")
	release()
	release() // once only
	assert.Equal(t, 3, s.stats().Running)

	// The hostile ones go on, three at a time.
	assert.Equal(t, 20, drain(t, hostile))
	assert.Equal(t, BackgroundStats{Slots: 4, Share: 3}, s.stats())
}

// When several namespaces fill the slots, a newcomer waits for the next
// slots to come free, not for the queues ahead of it: it gets one of the
// first (namespaces waiting) grants after it queued.
func TestSlotsNewcomerWaitsForSlotsNotQueues(t *testing.T) {
	s := newSlots(2, 1)
	ctx := context.Background()
	var a, b []chan func()
	for range 10 {
		a = append(a, acquireAsync(ctx, s, "a", time.Minute))
		b = append(b, acquireAsync(ctx, s, "b", time.Minute))
	}
	waitQueued(t, s, 18)
	victim := acquireAsync(ctx, s, "victim", time.Minute)
	waitQueued(t, s, 19)
	// Release whichever hold a slot, one at a time, counting the grants
	// until the victim's.
	others := append(append([]chan func(){}, a...), b...)
	var held []func()
	taken := map[chan func()]bool{}
	grantsBefore := 0
	for {
		for _, c := range others {
			if taken[c] {
				continue
			}
			select {
			case r := <-c:
				taken[c] = true
				held = append(held, r)
				grantsBefore++
			default:
			}
		}
		select {
		case r := <-victim:
			require.NotNil(t, r)
			r()
			// Two slots held at the start, plus at most one grant per
			// other namespace waiting (a, b) before the victim's turn.
			assert.LessOrEqual(t, grantsBefore, 2+2, "the victim went before the queues ahead of it")
			for _, r := range held {
				r()
			}
			var rest []chan func()
			for _, c := range others {
				if !taken[c] {
					rest = append(rest, c)
				}
			}
			assert.Equal(t, len(rest), drain(t, rest))
			return
		default:
		}
		if len(held) > 0 {
			held[0]()
			held = held[1:]
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The wait is bounded apart from the attach: past it the waiter gives up
// with ErrNoAttachSlot, saying how busy the slots were, and leaves the
// queue; a cancelled waiter leaves it too.
func TestSlotsWaitIsBoundedAndCancellable(t *testing.T) {
	s := newSlots(1, 1)
	release, _, err := s.acquire(context.Background(), "a", time.Second, nil)
	require.NoError(t, err)

	_, _, err = s.acquire(context.Background(), "b", 50*time.Millisecond, nil)
	require.ErrorIs(t, err, ErrNoAttachSlot)
	assert.Contains(t, err.Error(), `waited 50ms; 1 of the node's 1 attach slots busy, 0 attaches of 0 namespaces waiting (namespace "b": 0 running, 0 waiting`)
	assert.Equal(t, 0, s.stats().Waiting)

	ctx, cancel := context.WithCancelCause(context.Background())
	got := make(chan error, 1)
	go func() { _, _, err := s.acquire(ctx, "c", time.Minute, nil); got <- err }()
	waitQueued(t, s, 1)
	cancel(errors.New("the sandbox stopped"))
	assert.EqualError(t, <-got, "the sandbox stopped")
	assert.Equal(t, 0, s.stats().Waiting)

	release()
	assert.Equal(t, BackgroundStats{Slots: 1, Share: 1}, s.stats(), "nothing left held or waiting")
}
