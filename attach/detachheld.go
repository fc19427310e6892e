package attach

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nri-cni/nri-cni/netns"
	"github.com/nri-cni/nri-cni/state"
)

// A StopPodSandbox's teardown runs while the pod's namespace exists, but the
// runtime answers its NRI request deadline (containerd: 2 s) by going on
// without nri-cni: it removes the namespace's pin, and a DEL retried later
// runs with an empty netns, where a plugin skips what needs the namespace
// (bridge's ipMasq rule, found through the pod's address). Under load, a
// pod with several such networks did not finish in 2 s, and the masquerade
// rule stayed on the node.
//
// So a Stop holds the namespace open (an fd: it lives while held, whatever
// the runtime does to its pin) and DELs in it under the held path. If the
// DELs finish before the request's deadline, the answer is as before. If
// not, the runtime gets its answer in time (ErrTeardownContinues) and the
// DELs go on in the same namespace, up to HeldTeardownBudget, holding the
// sandbox's lock (a RemovePodSandbox meanwhile waits, or is retried); then
// the namespace is released. A failure is retried as any failed teardown.

// HeldTeardownBudget bounds a Stop's teardown that goes on past the
// runtime's deadline.
const HeldTeardownBudget = 2 * time.Minute

// ErrTeardownContinues: the runtime's deadline came first; the teardown goes
// on in the background in the pod's namespace, which nri-cni holds open.
var ErrTeardownContinues = errors.New("teardown goes on past the runtime's deadline, in the pod's network namespace (held open)")

// holdForStop holds sb's recorded namespace for a Stop (not final) whose
// record has networks to tear down and whose ctx has a deadline (a runtime
// request); nil otherwise (torn down already, no namespace, nothing to
// hold: the teardown runs as before).
func (m *Manager) holdForStop(ctx context.Context, sb Sandbox, final bool) *netns.Held {
	if final {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil
	}
	rec, err := m.store.Get(sb.ID)
	if err != nil || rec.Phase == state.PhaseTornDown || len(rec.Networks) == 0 {
		return nil
	}
	path := m.cni.usableNetns(rec)
	if path == "" {
		return nil
	}
	held, err := m.ns.Hold(path, netns.ID{Dev: rec.NetnsDev, Ino: rec.NetnsIno})
	if err != nil {
		m.logFor(sb).WithError(err).Debug("network namespace not held: tearing down in the runtime's request")
		return nil
	}
	return held
}

// detachHeld tears sb down in the held namespace; release (the sandbox's
// lock) and the namespace go when the teardown ends, which may be after
// this returns.
func (m *Manager) detachHeld(ctx context.Context, sb Sandbox, held *netns.Held, release func()) (bool, error) {
	type outcome struct {
		tore bool
		err  error
	}
	done := make(chan outcome, 1)
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HeldTeardownBudget)
	start := time.Now()
	go func() {
		var o outcome
		func() { // the namespace, the lock and the budget go before the answer
			defer cancel()
			defer release()
			defer held.Release()
			o.tore, o.err = m.detach(bctx, sb, false, held.Path)
			if o.err != nil {
				m.retries.failed(sb, false, time.Now())
			} else {
				m.retries.done(sb.ID)
			}
		}()
		done <- o
	}()
	wait, wcancel := context.WithCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		wait, wcancel = context.WithDeadline(ctx, d.Add(-m.margin))
	}
	defer wcancel()
	select {
	case o := <-done:
		return o.tore, o.err
	case <-wait.Done():
	}
	log := m.logFor(sb).WithField("budget", HeldTeardownBudget)
	go func() {
		o := <-done
		l := log.WithField("duration", time.Since(start).Round(time.Millisecond))
		if o.err != nil {
			l.WithError(o.err).Error("teardown past the runtime's deadline failed: the record is kept and the teardown retried")
			return
		}
		l.Info("teardown past the runtime's deadline done, in the pod's network namespace")
	}()
	return false, fmt.Errorf("%s: %w", PodRef(sb), ErrTeardownContinues)
}
