package reconcile

// Drift from CNI CHECK: every checkInterval, each attached network of each
// record is CHECKed with the config libcni cached at its ADD, under the
// sandbox's lock (never overlapping an ADD or DEL of the pod; a busy pod is
// skipped until the next round). A failure is reported (log, counter,
// Warning Event), never repaired: a new ADD could hand the pod another
// address. With MultiNetworkPolicy on, the same round compares each pod's
// table marker with its record; a table that drifted is reprogrammed (the
// rules are nri-cni's alone), with a Warning Event MultiNetworkPolicyDrift,
// and counted as a failure.

import (
	"context"
	"github.com/nri-cni/nri-cni/loop"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/state"
)

// CheckResult is one round of drift checks.
type CheckResult struct {
	Checked, Failed, Busy int
}

// CheckAttachments CHECKs every attached network of every record once.
func CheckAttachments(ctx context.Context, m Checker) CheckResult {
	var res CheckResult
	recs, _ := m.Records() // unreadable records are the resync's business
	for _, rec := range recs {
		if rec.Phase != state.PhaseAttached || len(rec.Networks) == 0 {
			continue
		}
		checked, failed, busy := m.Check(ctx, rec.ID)
		res.Checked += checked
		res.Failed += failed
		if busy {
			res.Busy++
		}
	}
	return res
}

// RunChecks runs CheckAttachments every interval until ctx ends, logging
// rounds that found something.
func RunChecks(ctx context.Context, m Checker, log *logrus.Entry, interval time.Duration) {
	loop.Every(ctx, interval, nil, false, func() {
		res := CheckAttachments(ctx, m)
		if res.Failed > 0 || res.Busy > 0 {
			log.WithFields(logrus.Fields{"checked": res.Checked, "failed": res.Failed, "busy": res.Busy}).Info("drift check done")
		}
	})
}
