package reconcile

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/state"
)

// fakeChecker is just what CheckAttachments needs: records and a CHECK.
type fakeChecker struct {
	recs    []*state.Record
	checked []string
}

func (f *fakeChecker) Records() ([]*state.Record, []error) {
	return f.recs, []error{errors.New("an unreadable file: the resync's business")}
}

func (f *fakeChecker) Check(_ context.Context, id string) (int, int, bool) {
	f.checked = append(f.checked, id)
	switch id {
	case "drifted":
		return 2, 1, false
	case "busy":
		return 0, 0, true
	}
	return 1, 0, false
}

// The drift round CHECKs attached records only, and sums what the engine
// answers; the loops reach the engine only through what they declare.
func TestCheckAttachmentsThroughItsInterface(t *testing.T) {
	nets := []state.Network{{Name: "n", IfName: "net1"}}
	f := &fakeChecker{recs: []*state.Record{
		{ID: "ok", Phase: state.PhaseAttached, Networks: nets},
		{ID: "drifted", Phase: state.PhaseAttached, Networks: nets},
		{ID: "busy", Phase: state.PhaseAttached, Networks: nets},
		{ID: "adding", Phase: state.PhaseAdding, Networks: nets},
		{ID: "empty", Phase: state.PhaseAttached},
	}}
	assert.Equal(t, CheckResult{Checked: 3, Failed: 1, Busy: 1}, CheckAttachments(context.Background(), f))
	assert.Equal(t, []string{"ok", "drifted", "busy"}, f.checked)
}

// attach.Manager is every reconciler's engine.
var (
	_ Checker       = (*attach.Manager)(nil)
	_ Collector     = (*attach.Manager)(nil)
	_ Releaser      = (*attach.Manager)(nil)
	_ StatusChecker = (*attach.Manager)(nil)
	_ SyncEngine    = (*attach.Manager)(nil)
)
