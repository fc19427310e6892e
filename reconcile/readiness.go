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
	"sort"
	"time"

	"github.com/nri-cni/nri-cni/attach"
)

// ReadinessObserver, when the engine's Observer implements it, learns each
// network's readiness (metrics).
type ReadinessObserver interface {
	NetworkReady(network string, ready bool)
}

// NetworkReadiness is one network's last STATUS answer.
type NetworkReadiness struct {
	Network string
	Ready   bool
	Reason  string // the plugin's message when not ready
}

// CheckReadiness asks every loaded network for STATUS now, records the
// answers for planning and returns them, sorted by network.
func CheckReadiness(ctx context.Context, m *attach.Manager) []NetworkReadiness {
	nets := m.Engine().Networks()
	notReady := map[string]error{}
	out := make([]NetworkReadiness, 0, len(nets))
	ro, _ := m.Observer().(ReadinessObserver)
	for _, n := range nets {
		cctx, cancel := context.WithTimeout(ctx, m.Config().CNITimeout.D())
		err := m.Engine().Status(cctx, n)
		cancel()
		r := NetworkReadiness{Network: n.Name, Ready: err == nil}
		if err != nil {
			notReady[n.Name], r.Reason = err, err.Error()
		}
		out = append(out, r)
		if ro != nil {
			ro.NetworkReady(n.Name, err == nil)
		}
	}
	before := m.Readiness().Set(notReady)
	for name, err := range notReady {
		if before[name] == nil {
			m.Log().WithField("network", name).WithError(err).Warn("network not ready (CNI STATUS): pods that need it fail until it is")
		}
	}
	for name := range before {
		if notReady[name] == nil {
			m.Log().WithField("network", name).Info("network ready again (CNI STATUS)")
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Network < out[j].Network })
	return out
}

// RunReadiness checks readiness now, every interval and whenever kick
// receives, until ctx ends.
func RunReadiness(ctx context.Context, m *attach.Manager, interval time.Duration, kick <-chan struct{}) {
	every(ctx, interval, kick, true, func() { CheckReadiness(ctx, m) })
}
