package dra

// Keeping the node's ResourceSlices current, at a bounded cost. Every NAD
// add, update or delete in the cluster kicks every node's driver: a
// tenant's NAD churn must not turn into unbounded work or writes on every
// node. So:
//   - kicks are coalesced (500 ms) and refreshes are at least MinRefresh
//     apart;
//   - a refresh re-checks only what is due (Verdicts: an unchanged NAD that
//     passed is checked once per refresh interval, one that failed with
//     backoff up to 5 minutes; at most ChecksPerNamespace per namespace);
//   - a changed inventory is published through a token bucket (Burst at
//     once, then one per Every): at most Burst + 60s/Every publishes a
//     minute, each writing the slices that changed — usually one
//     (slices.go);
//   - what is left out is reported (Reporter: a metric, Events on NADs).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// PublishLimits bound a node's refreshes and publishes; zero values are the
// defaults.
type PublishLimits struct {
	// Coalesce: kicks within this window make one refresh (default 500 ms).
	Coalesce time.Duration
	// MinRefresh: kick-driven refreshes are at least this far apart
	// (default 2 s).
	MinRefresh time.Duration
	// Burst publishes may go at once (default 3); then one per Every
	// (default 20 s).
	Burst int
	Every time.Duration
	// MaxBackoff: a NAD that fails its check is checked again after the
	// refresh interval, doubled at each failure up to this (default 5 min).
	MaxBackoff time.Duration
}

func (l PublishLimits) withDefaults() PublishLimits {
	if l.Coalesce <= 0 {
		l.Coalesce = 500 * time.Millisecond
	}
	if l.MinRefresh <= 0 {
		l.MinRefresh = 2 * time.Second
	}
	if l.Burst <= 0 {
		l.Burst = 3
	}
	if l.Every <= 0 {
		l.Every = 20 * time.Second
	}
	if l.MaxBackoff <= 0 {
		l.MaxBackoff = 5 * time.Minute
	}
	return l
}

// Reporter hears, after every refresh, the networks left out of the
// node's slice (kube: the nri_cni_dra_unpublished metric, Warning Events on
// the NADs). It must not block.
type Reporter interface {
	Unpublished(skipped []Skip)
}

// publishing is the driver's publishing state.
type publishing struct {
	once     sync.Once
	limits   PublishLimits
	verdicts *Verdicts
	bucket   bucket

	mu        sync.Mutex // guards packer, published, refreshed
	packer    packer
	published int // publishes handed to the ResourceSlice controller
	refreshed int // inventories built
}

func (d *Driver) publishingState() *publishing {
	p := &d.pubs
	p.once.Do(func() {
		p.limits = d.o.Publishing.withDefaults()
		p.verdicts = &Verdicts{Valid: d.o.Refresh, MaxBackoff: p.limits.MaxBackoff}
		p.bucket = bucket{burst: p.limits.Burst, every: p.limits.Every}
	})
	return p
}

// run keeps the ResourceSlice current until ctx ends.
func (d *Driver) run(ctx context.Context) {
	defer d.pub.Stop()
	p := d.publishingState()
	t := time.NewTicker(d.o.Refresh)
	defer t.Stop()
	var later <-chan time.Time // a publish the bucket put off
	dirty := false             // the inventory changed since the last publish
	last := time.Now()         // the last refresh
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-later:
			later = nil
		case <-d.kick:
			// Coalesce a burst (a namespace's NADs applied at once), and
			// keep refreshes apart (a tenant's NAD churn).
			wait := max(p.limits.Coalesce, p.limits.MinRefresh-time.Since(last))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if d.refresh() {
			dirty = true
		}
		if !dirty {
			continue
		}
		if wait := p.bucket.take(time.Now()); wait > 0 {
			if later == nil {
				later = time.After(wait)
			}
			continue
		}
		if err := d.publish(ctx); err != nil {
			d.o.Log.WithError(err).Warn("DRA: publishing the ResourceSlice failed; retrying")
			continue
		}
		dirty = false
	}
}

// refresh rebuilds the inventory; true when its devices changed. What is
// left out is logged when new and reported every time.
func (d *Driver) refresh() bool {
	p := d.publishingState()
	d.mu.Lock()
	multiple := d.multiple
	d.mu.Unlock()
	inv := BuildInventory(d.o.Candidates(), d.o.Checker.Check, InventoryOptions{Multiple: multiple,
		Slots: d.o.Config.SlotCount(), MaxDevices: d.o.Config.DeviceLimit(),
		MaxPerNamespace: d.o.Config.DevicesPerNamespace(), Seed: d.o.NodeName, Verdicts: p.verdicts})
	if d.o.Reporter != nil {
		d.o.Reporter.Unpublished(inv.Skipped)
	}
	p.mu.Lock()
	p.refreshed++
	p.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range inv.Skipped {
		if !slices.Contains(d.inv.Skipped, s) {
			d.o.Log.WithFields(logrus.Fields{"network": s.Network, "why": s.Class, "reason": s.Reason}).
				Warn("DRA: network not published: pods that claim it are not scheduled here")
		}
	}
	changed := !sameDevices(d.inv, inv)
	d.inv = inv
	return changed
}

// sameDevices: the same devices, of the same networks, with the same
// attributes (a NAD edited to another plugin type is published again), in
// the same order.
func sameDevices(a, b Inventory) bool {
	if len(a.Devices) != len(b.Devices) {
		return false
	}
	for i := range a.Devices {
		x, y := a.Devices[i], b.Devices[i]
		if x.Name != y.Name || a.Networks[x.Name] != b.Networks[y.Name] || !ptrEqual(x.AllowMultipleAllocations, y.AllowMultipleAllocations) ||
			len(x.Attributes) != len(y.Attributes) {
			return false
		}
		for k, v := range x.Attributes {
			w, ok := y.Attributes[k]
			if !ok || !ptrEqual(v.StringValue, w.StringValue) || !ptrEqual(v.BoolValue, w.BoolValue) ||
				!ptrEqual(v.VersionValue, w.VersionValue) || !ptrEqual(v.IntValue, w.IntValue) {
				return false
			}
		}
	}
	return true
}

func ptrEqual[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// publish hands the current devices to the publisher's ResourceSlice
// controller: one pool named after the node, in slices of at most 128 that
// keep each network where it was (slices.go).
func (d *Driver) publish(ctx context.Context) error {
	p := d.publishingState()
	d.mu.Lock()
	inv := d.inv
	multiple := d.multiple
	d.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	var pool resourceslice.Pool
	for _, devs := range p.packer.pack(inv.Devices, inv.DeviceNetwork) {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs})
	}
	if err := d.pub.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{d.o.NodeName: pool}}); err != nil {
		return fmt.Errorf("DRA: publishing: %w", err)
	}
	p.published++
	d.o.Log.WithFields(logrus.Fields{"devices": len(inv.Devices), "slices": len(pool.Slices), "notPublished": len(inv.Skipped),
		"multipleAllocations": multiple}).Info("DRA: ResourceSlice published")
	return nil
}

// Publishes is how many times the driver handed its devices to the
// ResourceSlice controller (tests, the fleet bench): each writes at most
// the slices that changed.
func (d *Driver) Publishes() int {
	p := d.publishingState()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

// Refreshes is how many times the driver built its inventory (tests, the
// fleet bench).
func (d *Driver) Refreshes() int {
	p := d.publishingState()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refreshed
}

// bucket is a token bucket: burst tokens, one more per every. Used by run
// only.
type bucket struct {
	burst  int
	every  time.Duration
	tokens float64
	at     time.Time
}

// take takes a token at now: 0 when it did, else how long until one is
// there.
func (b *bucket) take(now time.Time) time.Duration {
	if b.at.IsZero() {
		b.tokens, b.at = float64(b.burst), now
	}
	b.tokens = min(float64(b.burst), b.tokens+float64(now.Sub(b.at))/float64(b.every))
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return max(time.Duration((1-b.tokens)*float64(b.every)), time.Millisecond)
}

// network returns the network of a device of this node's pool: by its
// name, or, for a slot ("<base>-<n>") allocated before sharing switched to
// multiple allocations, by its base name (Networks holds both forms).
func (d *Driver) network(pool, device string) (string, bool) {
	if pool != d.o.NodeName {
		return "", false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.inv.Networks[device]; ok {
		return n, true
	}
	if i := strings.LastIndexByte(device, '-'); i > 0 {
		if _, err := strconv.Atoi(device[i+1:]); err == nil {
			n, ok := d.inv.Networks[device[:i]]
			return n, ok
		}
	}
	return "", false
}
