package reconcile

// Containers found running before their pod's networks were attached. With
// the node set up to fail closed (deploy/node: NRI's default validator, and
// the pod requiring nri-cni) this never happens: the runtime refuses the
// containers while nri-cni is away. On a node that is not, the resync after
// a (re)connect finds them: they are reported loudly, and with
// failClosed.restartStarted stopped once the pod is attached, so that the
// kubelet starts them again with the networks in place.

import (
	"context"
	"sync"
	"time"

	"github.com/nri-cni/nri-cni/attach"
)

// Container is a running container of a listed pod, as the runtime reports
// it (NRI Synchronize).
type Container struct {
	ID, Name string
	Pid      uint32 // in nri-cni's pid namespace (the host's)
}

// restarts tracks the containers being stopped (tests wait for them).
type restarts struct{ wg sync.WaitGroup }

// WaitRestarts waits until every container stop started by a resync is done.
func (r *Resyncer) WaitRestarts() { r.stops.wg.Wait() }

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
