package reconcile

// Containers found running before their pod's networks were attached. With
// the node set up to fail closed (deploy/node: NRI's default validator, and
// the pod requiring nri-cni) this never happens: the runtime refuses the
// containers while nri-cni is away. On a node that is not, the resync after
// a (re)connect finds them: they are reported loudly, and with
// failClosed.restartStarted stopped once the pod is attached, so that the
// kubelet starts them again with the networks in place. A pod whose attach
// fails is retried with backoff until it has its networks or is gone:
// its containers must not keep running without them.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/state"
)

// Container is a running container of a listed pod, as the runtime reports
// it (NRI Synchronize).
type Container struct {
	ID, Name string
	Pid      uint32 // in nri-cni's pid namespace (the host's)
}

// restarts tracks the containers being stopped (tests wait for them), and
// the pods whose containers run without their networks while their attach
// is retried (one loop per sandbox).
type restarts struct {
	wg sync.WaitGroup

	mu       sync.Mutex // guards retrying
	retrying map[string]bool
	loops    sync.WaitGroup
	// base is the first retry's delay (startedRetryBase; shorter in tests).
	base time.Duration
}

// Retries of an attach that failed for a pod whose containers already run:
// 1 s doubling to 5 min, as teardown retries.
const (
	startedRetryBase = time.Second
	startedRetryMax  = 5 * time.Minute
)

// WaitRestarts waits until every container stop started by a resync is done.
func (r *Resyncer) WaitRestarts() { r.stops.wg.Wait() }

// WaitRetries waits until every retry loop of a pod started without its
// networks has ended (attached, gone, or its context ended).
func (r *Resyncer) WaitRetries() { r.stops.loops.Wait() }

// RetryingStarted is how many such pods are being retried.
func (r *Resyncer) RetryingStarted() int {
	r.stops.mu.Lock()
	defer r.stops.mu.Unlock()
	return len(r.stops.retrying)
}

// retryStarted retries the attach of sb, whose containers ctrs run without
// its networks because its attach failed, until it is attached or gone: with
// backoff (startedRetryBase doubling to startedRetryMax), while the runtime
// runs it (Running) and ctx lasts (the connection: the next resync starts
// it again). Attached (by this loop, or by another path such as a new
// container's CreateContainer), the pod is reported again and its containers
// restarted if failClosed.restartStarted allows it, as after a resync's
// attach. One loop per sandbox.
func (r *Resyncer) retryStarted(ctx context.Context, sb attach.Sandbox, ctrs []Container, pidless bool) {
	st := &r.stops
	st.mu.Lock()
	if st.retrying == nil {
		st.retrying = map[string]bool{}
	}
	if st.retrying[sb.ID] {
		st.mu.Unlock()
		return
	}
	st.retrying[sb.ID] = true
	base := st.base
	st.mu.Unlock()
	if base <= 0 {
		base = startedRetryBase
	}
	st.loops.Add(1)
	go func() {
		defer st.loops.Done()
		defer func() {
			st.mu.Lock()
			delete(st.retrying, sb.ID)
			st.mu.Unlock()
		}()
		log := r.log.WithFields(logrus.Fields{"sandbox": sb.ID, "pod": sb.Pod.Name, "namespace": sb.Pod.Namespace})
		delay := base
		for attempt := 1; ; attempt++ {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if err := r.mgr.Running(sb, pidless); err != nil {
				log.WithError(err).Info("resync: a pod that ran without its networks is gone: its attach is no longer retried")
				return
			}
			attached, err := r.attachStarted(ctx, sb)
			if attached {
				log.WithField("attempts", attempt).Warn("resync: a pod whose containers ran without its networks is attached now")
				r.startedWithout(ctx, sb, ctrs, true)
				return
			}
			if err == nil {
				return // nothing to attach any more (nri.conf changed)
			}
			delay = min(delay*2, startedRetryMax)
			log.WithError(err).WithField("retryIn", delay).Error("resync: the pod's containers run without its networks and its attach failed again")
		}
	}()
}

// attachStarted is one retry: attached reports whether the pod has its
// networks now; err is nil (and attached false) when it gets none.
func (r *Resyncer) attachStarted(ctx context.Context, sb attach.Sandbox) (attached bool, err error) {
	cfg := r.mgr.Config()
	actx, cancel := context.WithTimeout(ctx, time.Duration(len(cfg.Networks)+1)*cfg.CNITimeout.D()*2)
	defer cancel()
	rec, err := r.mgr.AttachIfAbsent(actx, sb)
	switch {
	case errors.Is(err, attach.ErrKnown):
		// Attached by another path meanwhile, or still being attached.
		rec, err := r.mgr.Record(sb.ID)
		if err != nil {
			return false, err
		}
		if rec.Phase != state.PhaseAttached {
			return false, fmt.Errorf("its record is in phase %q: %w", rec.Phase, attach.ErrBusy)
		}
		return true, nil
	case err != nil:
		return false, err
	}
	return rec != nil, nil
}

// startedWithout reports the pod sb, whose containers ctrs were running when
// the resync attached it (attached) or failed to, and stops them when the
// admin allows it and the pod has its networks now.
func (r *Resyncer) startedWithout(ctx context.Context, sb attach.Sandbox, ctrs []Container, attached bool) {
	m := r.mgr
	fc := m.Config().FailClosed
	names := make([]string, 0, len(ctrs))
	for _, c := range ctrs {
		names = append(names, c.Name)
	}
	restart := attached && fc.RestartStarted
	m.ReportStartedWithout(attach.StartedWithout{Namespace: sb.Pod.Namespace, Name: sb.Pod.Name, UID: sb.Pod.UID,
		SandboxID: sb.ID, Containers: names, Attached: attached, Restarting: restart})
	if !restart {
		return
	}
	for _, c := range ctrs {
		r.stops.wg.Add(1)
		go func() {
			defer r.stops.wg.Done()
			log := r.log.WithField("pod", sb.Pod.Name).WithField("namespace", sb.Pod.Namespace).
				WithField("container", c.Name).WithField("pid", c.Pid)
			start := time.Now()
			killed, err := StopContainer(ctx, m, sb.Pinned, c.Pid, fc.RestartGrace.D())
			log = log.WithField("duration", time.Since(start).Round(time.Millisecond))
			switch {
			case err != nil:
				log.WithError(err).Error("failClosed.restartStarted: not stopped")
			case killed:
				log.Warn("failClosed.restartStarted: stopped (SIGKILL after the grace period); the kubelet starts it again with the pod's networks")
			default:
				log.Warn("failClosed.restartStarted: stopped (SIGTERM); the kubelet starts it again with the pod's networks")
			}
		}()
	}
}
