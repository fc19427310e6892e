package reconcile

import (
	"context"
	"time"
)

// every runs f every interval, and at once whenever kick (nil: never)
// receives, until ctx ends; first runs it once at the start too. A run
// that overlaps ticks skips them (time.Ticker drops ticks).
func every(ctx context.Context, interval time.Duration, kick <-chan struct{}, first bool, f func()) {
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
