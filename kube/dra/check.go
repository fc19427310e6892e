package dra

// Can a network attach on this node? Only networks that can are published,
// so the scheduler places a pod where its networks attach: every plugin's
// binary is in binDirs, the host interface the main plugin hangs off
// (macvlan, ipvlan, vlan master; host-device device) exists, and the
// plugins answer CNI STATUS with ready.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

// Checker decides whether a candidate can attach here.
type Checker struct {
	// FindPlugin fails when no binary of that plugin type is in binDirs.
	FindPlugin func(typ string) error
	// LinkExists fails when the host has no interface of that name.
	LinkExists func(name string) error
	// NotReady returns why the network (by CNI name) answered CNI STATUS
	// with not ready, nil when it is ready (or was not asked).
	NotReady func(c Candidate) error
}

// hostLinkKeys: the key of the host interface a plugin type needs.
var hostLinkKeys = map[string]string{"macvlan": "master", "ipvlan": "master", "vlan": "master", "host-device": "device"}

// Check returns why c cannot attach here, nil when it can.
func (k Checker) Check(c Candidate) error {
	if c.Net == nil || c.Net.List == nil || len(c.Net.List.Plugins) == 0 {
		return fmt.Errorf("no CNI config")
	}
	for _, p := range c.Net.List.Plugins {
		if k.FindPlugin != nil {
			if err := k.FindPlugin(p.Network.Type); err != nil {
				return fmt.Errorf("plugin %q: %w", p.Network.Type, err)
			}
		}
	}
	main := c.Net.List.Plugins[0]
	if key, ok := hostLinkKeys[main.Network.Type]; ok && k.LinkExists != nil {
		var conf map[string]any
		_ = json.Unmarshal(main.Bytes, &conf)
		if name, _ := conf[key].(string); name != "" {
			if err := k.LinkExists(name); err != nil {
				return fmt.Errorf("%s %q: host interface %q: %w", main.Network.Type, key, name, err)
			}
		}
	}
	if k.NotReady != nil {
		if err := k.NotReady(c); err != nil {
			return fmt.Errorf("not ready (CNI STATUS): %w", err)
		}
	}
	return nil
}

// StatusCache answers CNI STATUS for NetworkAttachmentDefinition networks
// (the config dir's are asked by the readiness reconciler): one STATUS per
// distinct config per ttl, on the driver's refresh, never on a pod's path.
type StatusCache struct {
	Status func(ctx context.Context, n *cni.Network) error
	TTL    time.Duration
	// Max bounds the answers kept (0: 4 × the default maxDevices); past it
	// the expired ones go, then the oldest, one by one.
	Max int

	mu   sync.Mutex // guards seen
	seen map[[32]byte]statusAnswer
}

type statusAnswer struct {
	err error
	at  time.Time
}

// NotReady returns the network's STATUS answer (asking at most once per
// TTL per config), nil when ready.
func (s *StatusCache) NotReady(ctx context.Context, n *cni.Network) error {
	key := sha256.Sum256(n.List.Bytes)
	now := time.Now()
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[[32]byte]statusAnswer{}
	}
	if a, ok := s.seen[key]; ok && now.Sub(a.at) < s.TTL {
		s.mu.Unlock()
		return a.err
	}
	s.mu.Unlock()
	err := s.Status(ctx, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[key] = statusAnswer{err: err, at: now}
	s.evict(now)
	return err
}

// evict keeps at most Max answers: configs come and go, the cache never
// grows without bound, and the answers of the configs in use stay (never
// dropped wholesale, which would make every refresh ask every plugin again).
func (s *StatusCache) evict(now time.Time) {
	limit := s.Max
	if limit <= 0 {
		limit = 4 * config.DefaultDRAMaxDevices
	}
	if len(s.seen) <= limit {
		return
	}
	for k, a := range s.seen {
		if now.Sub(a.at) >= s.TTL {
			delete(s.seen, k)
		}
	}
	for len(s.seen) > limit {
		var oldest [32]byte
		var at time.Time
		for k, a := range s.seen {
			if at.IsZero() || a.at.Before(at) {
				oldest, at = k, a.at
			}
		}
		delete(s.seen, oldest)
	}
}

// Verdicts remembers check answers of NADs between inventory builds, per
// network and config (a changed NAD is a new key, checked afresh): a
// passing answer holds for Valid (the refresh interval, so each refresh
// checks a published NAD again, and a NAD change elsewhere checks none), a
// failing one for Valid doubled at each failure up to MaxBackoff (a NAD
// that cannot attach costs a check every few minutes, not every refresh).
// Entries of networks no longer candidates go at the build's end. Safe
// for concurrent use.
type Verdicts struct {
	// Now is the clock (nil: time.Now).
	Now        func() time.Time
	Valid      time.Duration
	MaxBackoff time.Duration

	mu sync.Mutex // guards m
	m  map[string]verdict
}

type verdict struct {
	err   error
	due   time.Time
	fails int
}

func (v *Verdicts) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// key is the candidate's network and config.
func (v *Verdicts) key(c Candidate) string {
	if c.Net == nil || c.Net.List == nil {
		return c.Network
	}
	sum := sha256.Sum256(c.Net.List.Bytes)
	return c.Network + "\x00" + string(sum[:])
}

// lookup returns the last answer for key, whether there is one, and
// whether it is still due (fresh: no need to check again).
func (v *Verdicts) lookup(key string) (err error, known, fresh bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[key]
	if !ok {
		return nil, false, false
	}
	return e.err, true, v.now().Before(e.due)
}

// store records an answer.
func (v *Verdicts) store(key string, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]verdict{}
	}
	valid := v.Valid
	if valid <= 0 {
		valid = 30 * time.Second
	}
	e := verdict{err: err}
	if err != nil {
		e.fails = v.m[key].fails + 1
		backoff := valid
		for i := 1; i < e.fails && backoff < v.MaxBackoff; i++ {
			backoff *= 2
		}
		if v.MaxBackoff > 0 {
			backoff = min(backoff, v.MaxBackoff)
		}
		valid = backoff
	}
	// A little early: the refresh that comes Valid later checks again.
	e.due = v.now().Add(valid - valid/10)
	v.m[key] = e
}

// sweep drops the answers of keys not used by the last build.
func (v *Verdicts) sweep(used map[string]bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k := range v.m {
		if !used[k] {
			delete(v.m, k)
		}
	}
}

// Len is the number of answers kept.
func (v *Verdicts) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.m)
}
