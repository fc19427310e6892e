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
	if len(s.seen) > 4*config.DefaultDRAMaxDevices {
		clear(s.seen) // configs come and go; never grow without bound
	}
	s.seen[key] = statusAnswer{err: err, at: now}
	return err
}
