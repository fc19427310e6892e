package cni_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nri-cni/nri-cni/cni"
)

// slack absorbs scheduling delays between computing and checking a deadline.
const slack = 500 * time.Millisecond

func near(got, want time.Time) bool {
	d := got.Sub(want)
	return d > -slack && d < slack
}

func TestBudgetNoParentDeadline(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx, cancel, err := cni.Budget(context.Background(), 2*time.Second, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("Budget: %v", err)
	}
	defer cancel()
	dl, ok := ctx.Deadline()
	if !ok {
		t.Fatal("no deadline")
	}
	if want := start.Add(2 * time.Second); !near(dl, want) {
		t.Errorf("deadline = %v, want ~%v", dl, want)
	}
}

func TestBudgetParentLater(t *testing.T) {
	t.Parallel()
	parent, pcancel := context.WithTimeout(context.Background(), time.Hour)
	defer pcancel()
	start := time.Now()
	ctx, cancel, err := cni.Budget(parent, 2*time.Second, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("Budget: %v", err)
	}
	defer cancel()
	dl, _ := ctx.Deadline()
	if want := start.Add(2 * time.Second); !near(dl, want) {
		t.Errorf("deadline = %v, want ~%v (own timeout, parent is later)", dl, want)
	}
}

func TestBudgetParentEarlier(t *testing.T) {
	t.Parallel()
	pdl := time.Now().Add(3 * time.Second)
	parent, pcancel := context.WithDeadline(context.Background(), pdl)
	defer pcancel()
	margin := time.Second
	ctx, cancel, err := cni.Budget(parent, time.Minute, margin)
	if err != nil {
		t.Fatalf("Budget: %v", err)
	}
	defer cancel()
	dl, _ := ctx.Deadline()
	if want := pdl.Add(-margin); !dl.Equal(want) {
		t.Errorf("deadline = %v, want parent-margin = %v", dl, want)
	}
	// Cancelling the parent cancels the budget.
	pcancel()
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
		t.Error("budget context not cancelled with its parent")
	}
}

func TestBudgetNoTimeLeft(t *testing.T) {
	t.Parallel()
	for name, pdl := range map[string]time.Time{
		"within margin": time.Now().Add(100 * time.Millisecond),
		"at margin":     time.Now().Add(time.Second),
		"already past":  time.Now().Add(-time.Second),
	} {
		parent, pcancel := context.WithDeadline(context.Background(), pdl)
		ctx, cancel, err := cni.Budget(parent, time.Minute, time.Second)
		pcancel()
		if !errors.Is(err, cni.ErrNoTime) {
			t.Errorf("%s: Budget err = %v, want ErrNoTime", name, err)
		}
		if ctx != nil || cancel != nil {
			t.Errorf("%s: Budget returned a context with an error", name)
		}
	}
}
