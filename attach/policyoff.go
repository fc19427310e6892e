package attach

import (
	"context"
	"errors"
	"fmt"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/netpol/ir"
	"github.com/nri-cni/nri-cni/state"
)

// removePolicies is Manager.RemovePolicies.
func removePolicies(ctx context.Context, m *Manager, fw Firewall, links func(path string, ifnames []string, up bool) error) (removed int, err error) {
	if links == nil {
		links = netns.SetLinksUp
	}
	recs, errs := m.store.List() // unreadable records: reported, the others done
	for _, r := range recs {
		if r.Policy == nil || r.Phase != state.PhaseAttached {
			continue
		}
		ok, err := removePolicy(ctx, m, fw, links, r.ID)
		if ok {
			removed++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// removePolicy is removePolicies for sandbox id, under its lock.
func removePolicy(ctx context.Context, m *Manager, fw Firewall, links func(string, []string, bool) error, id string) (bool, error) {
	release, err := m.locks.sandbox(ctx, id, BackgroundLockWait, m.margin)
	if err != nil {
		return false, fmt.Errorf("sandbox %s: removing its MultiNetworkPolicy table: %w", short(id), err)
	}
	defer release()
	rec, err := m.store.Get(id)
	if errors.Is(err, state.ErrNotFound) {
		return false, nil
	}
	if err != nil || rec.Policy == nil {
		return false, err
	}
	// Only the namespace the record names: never another one, never the
	// host's (Check refuses it).
	ns, live := (&policies{m: m}).recordedNetns(rec)
	if live {
		if err := fw.Apply(ctx, ns, ir.Ruleset{}); err != nil {
			return false, fmt.Errorf("%s: removing its MultiNetworkPolicy table: %w", recRef(rec), err)
		}
		if q := rec.Policy.Quarantined; len(q) > 0 {
			if err := links(ns.Path, q, true); err != nil {
				return false, fmt.Errorf("%s: ending the MultiNetworkPolicy quarantine: %w", recRef(rec), err)
			}
		}
	}
	rec.Policy = nil
	if err := m.store.Put(rec); err != nil {
		return live, fmt.Errorf("%s: %w", recRef(rec), err)
	}
	return live, nil
}
