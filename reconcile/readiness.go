package reconcile

// Readiness from CNI STATUS (spec 1.1.0): every loaded network's plugins
// are asked on load, after every config reload and every statusInterval.
// The answers go to the engine's plan.Readiness: a network that is not ready
// fails the pods that need it at once, before anything is recorded or
// ADDed, with the plugin's message. Configs older than 1.1.0 count as
// ready. This is about the networks; nri-cni's own /healthz does not depend
// on it.

import (
	"context"
	"github.com/nri-cni/nri-cni/loop"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
)

// ReadinessObserver and NetworkReadiness are the engine's (attach).
type (
	ReadinessObserver = attach.ReadinessObserver
	NetworkReadiness  = attach.NetworkReadiness
)

// StatusChecker asks the engine's networks for CNI STATUS and records the
// answers for planning (attach.Manager.CheckNetworks).
type StatusChecker interface {
	CheckNetworks(ctx context.Context) ([]attach.NetworkReadiness, map[string]error)
}

// CheckReadiness asks every loaded network for STATUS now, records the
// answers for planning and returns them, sorted by network; each change of
// a network's readiness is logged.
func CheckReadiness(ctx context.Context, m StatusChecker, log *logrus.Entry) []NetworkReadiness {
	out, changed := m.CheckNetworks(ctx)
	for name, err := range changed {
		if err != nil {
			log.WithField("network", name).WithError(err).Warn("network not ready (CNI STATUS): pods that need it fail until it is")
		} else {
			log.WithField("network", name).Info("network ready again (CNI STATUS)")
		}
	}
	return out
}

// RunReadiness checks readiness now, every interval and whenever kick
// receives, until ctx ends.
func RunReadiness(ctx context.Context, m StatusChecker, log *logrus.Entry, interval time.Duration, kick <-chan struct{}) {
	loop.Every(ctx, interval, kick, true, func() { CheckReadiness(ctx, m, log) })
}
