package hook

// Readiness from CNI STATUS (spec 1.1.0) and drift from CNI CHECK.
//
// STATUS: every loaded network's plugins are asked on load, after every
// config reload and every statusInterval. A network that is not ready fails
// the pods that need it at once, before anything is recorded or ADDed, with
// the plugin's message. Configs older than 1.1.0 count as ready. This is
// about the networks; nri-cni's own /healthz does not depend on it.
//
// CHECK: every checkInterval, each attached network of each record is
// CHECKed with the config libcni cached at its ADD, under the sandbox's
// lock (never overlapping an ADD or DEL of the pod; a busy pod is skipped
// until the next round). A failure is reported (log, counter, Warning
// Event), never repaired: a new ADD could hand the pod another address.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/state"
)

// ErrNetworkNotReady: a network's plugin reported not ready (CNI STATUS).
var ErrNetworkNotReady = errors.New("network not ready (CNI STATUS)")

// ReadinessObserver, when the Observer implements it, learns each network's
// readiness and every failed CHECK (metrics).
type ReadinessObserver interface {
	NetworkReady(network string, ready bool)
	CheckFailed(network string)
}

// DriftSink, when the status sink implements it, is told of every failed
// CHECK (a Warning Event on the pod).
type DriftSink interface {
	CheckFailed(AttachFailure)
}

// readiness is the last STATUS answer of each network (nil: ready).
type readiness struct {
	mu       sync.RWMutex // guards notReady
	notReady map[string]error
}

// NetworkReadiness is one network's last STATUS answer.
type NetworkReadiness struct {
	Network string
	Ready   bool
	Reason  string // the plugin's message when not ready
}

// CheckReadiness asks every loaded network for STATUS now and returns the
// answers, sorted by network.
func (m *Manager) CheckReadiness(ctx context.Context) []NetworkReadiness {
	nets := m.engine.Networks()
	notReady := map[string]error{}
	out := make([]NetworkReadiness, 0, len(nets))
	ro, _ := m.obs.(ReadinessObserver)
	for _, n := range nets {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CNITimeout.D())
		err := m.engine.Status(cctx, n)
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
	m.ready.mu.Lock()
	before := m.ready.notReady
	m.ready.notReady = notReady
	m.ready.mu.Unlock()
	for name, err := range notReady {
		if before[name] == nil {
			m.log.WithField("network", name).WithError(err).Warn("network not ready (CNI STATUS): pods that need it fail until it is")
		}
	}
	for name := range before {
		if notReady[name] == nil {
			m.log.WithField("network", name).Info("network ready again (CNI STATUS)")
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Network < out[j].Network })
	return out
}

// RunReadiness checks readiness now, every interval and whenever kick
// receives, until ctx ends.
func (m *Manager) RunReadiness(ctx context.Context, interval time.Duration, kick <-chan struct{}) {
	m.CheckReadiness(ctx)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		m.CheckReadiness(ctx)
	}
}

// checkReady fails a plan that needs a network whose plugins said they are
// not ready.
func (m *Manager) checkReady(plan []attachment) error {
	m.ready.mu.RLock()
	defer m.ready.mu.RUnlock()
	for _, a := range plan {
		if err := m.ready.notReady[a.net.Name]; err != nil {
			return fmt.Errorf("%s: %w: %w", attachmentName(a), ErrNetworkNotReady, err)
		}
	}
	return nil
}

// CheckResult is one round of drift checks.
type CheckResult struct {
	Checked, Failed, Busy int
}

// CheckAttachments CHECKs every attached network of every record once.
func (m *Manager) CheckAttachments(ctx context.Context) CheckResult {
	var res CheckResult
	recs, _ := m.store.List() // unreadable records are the resync's business
	for _, rec := range recs {
		if rec.Phase != state.PhaseAttached || len(rec.Networks) == 0 {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		unlock, err := m.lockWithin(lctx, rec.ID)
		cancel()
		if err != nil {
			res.Busy++
			continue
		}
		m.checkRecord(ctx, rec.ID, &res)
		unlock()
		m.gcMu.RUnlock()
	}
	return res
}

// checkRecord CHECKs one sandbox's networks (its lock held).
func (m *Manager) checkRecord(ctx context.Context, id string, res *CheckResult) {
	rec, err := m.store.Get(id) // as it is now, under the lock
	if err != nil || rec.Phase != state.PhaseAttached {
		return
	}
	nsPath := m.usableNetns(rec)
	if nsPath == "" {
		return // the netns is gone: the watcher or Stop tears it down
	}
	log := m.log.WithFields(logrus.Fields{"sandbox": rec.ID, "pod": rec.Name, "namespace": rec.Namespace})
	for _, n := range rec.Networks {
		if n.Pending {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CNITimeout.D())
		err := m.engine.Check(cctx, n.Name, cni.Attachment{ContainerID: rec.ID, IfName: n.IfName, Netns: nsPath})
		cancel()
		res.Checked++
		if err == nil || errors.Is(err, cni.ErrNoCachedConfig) {
			continue
		}
		res.Failed++
		name := n.NAD
		if name == "" {
			name = n.Name
		}
		log.WithFields(logrus.Fields{"network": n.Name, "ifname": n.IfName}).WithError(err).
			Warn("CNI CHECK failed: the attachment drifted from what its ADD set up (not repaired)")
		if ro, ok := m.obs.(ReadinessObserver); ok {
			ro.CheckFailed(m.metricsLabel(n.Name))
		}
		if ds, ok := m.sink.(DriftSink); ok && rec.Kind == "pod" && rec.UID != "" {
			ds.CheckFailed(AttachFailure{Namespace: rec.Namespace, Name: rec.Name, UID: rec.UID, SandboxID: rec.ID,
				Network: name, Err: fmt.Errorf("interface %s: %w", n.IfName, err)})
		}
	}
}

// RunChecks runs CheckAttachments every interval until ctx ends.
func (m *Manager) RunChecks(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			res := m.CheckAttachments(ctx)
			if res.Failed > 0 || res.Busy > 0 {
				m.log.WithFields(logrus.Fields{"checked": res.Checked, "failed": res.Failed, "busy": res.Busy}).Info("drift check done")
			}
		}
	}
}
