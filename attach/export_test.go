package attach

import "time"

// SetBackgroundLimits replaces the background attaches' bounds (slots,
// one namespace's share of them, the budget, the wait for a slot), before
// any Start: a test's node is small and its chains are quick.
func (b *Background) SetBackgroundLimits(total, share int, budget, maxWait time.Duration) {
	b.slots = newSlots(total, share)
	b.budget, b.maxWait = budget, maxWait
}

// RunningIn is how many slots a namespace's attaches hold.
func (b *Background) RunningIn(namespace string) int { return b.slots.runningIn(namespace) }

// SetRescueMargin replaces RescueMargin (a test's budget is short).
func (b *Background) SetRescueMargin(d time.Duration) { b.rescue = d }
