package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/state"
)

// GCResult says what a GC pass did.
type GCResult struct {
	Kept        int // records whose sandbox is alive
	TornDown    int // stale records torn down and dropped
	Repaired    int // unreadable records of live sandboxes rebuilt from libcni's cache
	StaleCached int // cached attachments without a record, DELeted
	Busy        int // sandboxes (or libcni's GC) skipped: another operation held them
	Errors      []error
	// Strays are files in the state dir that name no sandbox: left alone,
	// for the caller to report (not an error of the pass).
	Strays []error
}

// Err joins the pass's errors.
func (r GCResult) Err() error { return errors.Join(r.Errors...) }

// GC tears down records whose sandbox is gone (live; nil: gone when its
// recorded network namespace is), rebuilds unreadable ones of live
// sandboxes from libcni's cache, DELs cached attachments of nri-cni's that
// no record claims (with an empty netns: a cached netns path may have been
// reused), and then runs libcni's GC (CNI 1.1) for every loaded network
// with the attachments still valid. Every sandbox is handled under its own
// lock with a bounded wait: a busy one is skipped until the next pass.
func GC(ctx context.Context, m Collector, live attach.LiveFunc) GCResult {
	if live == nil {
		live = func(rec *state.Record) bool { return m.NetnsUsable(rec) != "" }
	}
	var res GCResult
	recs, errs := m.Records()
	ids := make([]string, 0, len(recs)+len(errs))
	for _, rec := range recs {
		if live(rec) {
			res.Kept++
			continue
		}
		ids = append(ids, rec.ID)
	}
	for _, err := range errs {
		var re *state.RecordError
		if errors.As(err, &re) {
			ids = append(ids, re.ID) // unreadable: rebuilt, then judged
			continue
		}
		res.Strays = append(res.Strays, err)
	}
	for _, id := range ids {
		out, err := m.Collect(ctx, id, live)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("gc: %w", err))
		}
		switch out {
		case attach.Kept:
			res.Kept++
		case attach.Repaired:
			res.Repaired++
			res.Kept++
		case attach.TornDown:
			res.TornDown++
		case attach.Busy:
			res.Busy++
		}
	}
	n, busy, errs := m.CollectCached(ctx)
	res.StaleCached, res.Busy = n, res.Busy+busy
	res.Errors = append(res.Errors, errs...)
	skipped, errs := m.PluginGC(ctx)
	if skipped {
		res.Busy++
	}
	res.Errors = append(res.Errors, errs...)
	return res
}
