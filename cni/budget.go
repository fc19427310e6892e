package cni

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoTime: the caller's deadline leaves no time for a CNI call.
var ErrNoTime = errors.New("no time left for the CNI call before the runtime's deadline")

// Budget returns a context for one CNI call: its deadline is the earlier of
// now+timeout and the parent's deadline minus margin, so a slow chain ends in
// our clear error before the runtime gives up on us (containerd drops an NRI
// plugin that overruns its request timeout).
func Budget(parent context.Context, timeout, margin time.Duration) (context.Context, context.CancelFunc, error) {
	deadline := time.Now().Add(timeout)
	if pd, ok := parent.Deadline(); ok {
		if d := pd.Add(-margin); d.Before(deadline) {
			deadline = d
		}
	}
	if left := time.Until(deadline); left <= 0 {
		return nil, nil, fmt.Errorf("%w (margin %s)", ErrNoTime, margin)
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	return ctx, cancel, nil
}
