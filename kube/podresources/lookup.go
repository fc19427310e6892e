package podresources

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A flight is one call to the kubelet (a Get for one pod, or a List) and the
// lookups waiting for it. Fields without a comment are set at start; the
// results are set before done is closed and read only after.
type flight struct {
	list    bool
	key     string // namespace/name for a Get
	started time.Time
	done    chan struct{}
	cancel  context.CancelFunc

	waiters   int   // guarded by Client.mu
	finished  bool  // guarded by Client.mu
	abandoned bool  // guarded by Client.mu: every waiter left, the call is cancelled
	lastErr   error // guarded by Client.mu: the last failed attempt

	pods map[string][]*PodResources // by namespace/name
	err  error
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// lookup finds pod in a kubelet answer and checks it with accept. Rule: a
// pod (or, through accept, a resource) present in an answer is taken from it;
// absent, it counts only in an answer whose call started after the lookup
// began, else a fresh call is made (an older answer may predate the pod).
func (c *Client) lookup(ctx context.Context, pod Pod, accept func(*PodResources) error) (*PodResources, error) {
	if pod.Namespace == "" || pod.Name == "" {
		return nil, errors.New("the pod's namespace and name are required")
	}
	arrival := c.now()
	if p := c.cached(pod, arrival); p != nil && accept(p) == nil {
		c.count(func(s *Stats) { s.CacheHits++ })
		return p, nil
	}
	notBefore := arrival.Add(-max(c.o.ListReuse, 0))
	key := podKey(pod.Namespace, pod.Name)
	for {
		f, reselect := c.join(key, notBefore)
		if err := c.wait(ctx, f); err != nil {
			return nil, err
		}
		if reselect {
			continue
		}
		if errors.Is(f.err, errGetUnsupported) {
			continue // join picks List now
		}
		if f.err != nil {
			return nil, f.err
		}
		fresh := !f.started.Before(arrival)
		var err error
		switch matches := f.pods[key]; len(matches) {
		case 0:
			err = ErrPodNotFound
		case 1:
			if err = accept(matches[0]); err == nil {
				c.store(pod, matches[0])
				return matches[0], nil
			}
		default:
			err = fmt.Errorf("%w (%d of them)", ErrAmbiguousPod, len(matches))
		}
		if fresh {
			if errors.Is(err, ErrPodNotFound) {
				c.count(func(s *Stats) { s.PodsNotListed++ })
			}
			return nil, err
		}
		notBefore = arrival
	}
}

// join returns the flight whose answer the lookup of key takes: a List
// started at or after notBefore (in flight, or finished within ListReuse), a
// Get of key in flight started at or after notBefore, a new Get while fewer
// than MaxParallelGets are in flight and the kubelet serves Get, else a new
// List. If a List too old for the lookup is still in flight, it returns that
// one with reselect: wait for it, then choose again (one List at a time).
// The caller is counted as a waiter of the flight returned.
func (c *Client) join(key string, notBefore time.Time) (f *flight, reselect bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if l := c.list; l != nil && !l.abandoned && !l.started.Before(notBefore) &&
		(!l.finished || (l.err == nil && now.Sub(l.started) <= c.o.ListReuse)) {
		l.waiters++
		c.stats.Coalesced++
		if l.finished {
			c.stats.ListsReused++
		}
		return l, false
	}
	if g := c.gets[key]; g != nil && !g.started.Before(notBefore) {
		g.waiters++
		c.stats.Coalesced++
		return g, false
	}
	if c.o.MaxParallelGets > 0 && !now.Before(c.getOffUntil) && len(c.gets) < c.o.MaxParallelGets {
		g := c.startLocked(false, key, now)
		c.gets[key] = g
		return g, false
	}
	if l := c.list; l != nil && !l.finished && !l.abandoned {
		l.waiters++
		return l, true
	}
	c.list = c.startLocked(true, "", now)
	return c.list, false
}

// wait waits for f or ctx. A lookup leaving early stops counting as f's
// waiter; the last one to leave cancels the call.
func (c *Client) wait(ctx context.Context, f *flight) error {
	select {
	case <-f.done:
		c.mu.Lock()
		f.waiters--
		c.mu.Unlock()
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f.waiters--
	last := f.lastErr
	if f.waiters == 0 && !f.finished {
		f.abandoned = true
		if c.list == f {
			c.list = nil
		}
		if !f.list && c.gets[f.key] == f {
			delete(c.gets, f.key)
		}
		f.cancel()
	}
	if last != nil {
		return fmt.Errorf("%w (the kubelet's last answer: %v)", ctx.Err(), last)
	}
	return ctx.Err()
}

func (c *Client) count(f func(*Stats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.stats)
}
