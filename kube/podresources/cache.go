package podresources

import "time"

// cacheEntry is one pod's answer, by UID. A pod's device plugin devices are
// allocated once, at admission, and never change while it lives, so an answer
// stays true for the pod; the TTL only bounds memory and a stale UID.
type cacheEntry struct {
	pod     *PodResources
	expires time.Time
}

func (c *Client) cached(pod Pod, now time.Time) *PodResources {
	if pod.UID == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[pod.UID]
	if !ok {
		return nil
	}
	if now.After(e.expires) || e.pod.Namespace != pod.Namespace || e.pod.Name != pod.Name {
		delete(c.cache, pod.UID)
		return nil
	}
	return e.pod
}

// store caches p for pod. When full, expired entries go first, then the one
// that expires soonest.
func (c *Client) store(pod Pod, p *PodResources) {
	if pod.UID == "" || c.o.CacheTTL < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.cache[pod.UID]; !ok && len(c.cache) >= c.o.MaxEntries {
		var oldest string
		for uid, e := range c.cache {
			if now.After(e.expires) {
				delete(c.cache, uid)
			} else if oldest == "" || e.expires.Before(c.cache[oldest].expires) {
				oldest = uid
			}
		}
		if len(c.cache) >= c.o.MaxEntries {
			delete(c.cache, oldest)
		}
	}
	c.cache[pod.UID] = cacheEntry{pod: p, expires: now.Add(c.o.CacheTTL)}
}
