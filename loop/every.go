// Package loop runs the node's periodic work: one ticker loop for the
// reconcilers and the DRA driver's record keeper.
package loop

import (
	"context"
	"time"
)

// Every runs f every interval, and at once whenever kick (nil: never)
// receives, until ctx ends; first runs it once at the start too. A run
// that overlaps ticks skips them (time.Ticker drops ticks).
func Every(ctx context.Context, interval time.Duration, kick <-chan struct{}, first bool, f func()) {
	if first {
		f()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		if ctx.Err() != nil {
			return
		}
		f()
	}
}
