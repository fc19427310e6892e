package nri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/reconcile"
)

// Serving: nri-cni serves the runtime once it is connected and has
// synchronized with it — the resync that follows every (re)connect has
// torn down what went away and attached the pods created meanwhile. Until
// then a readiness probe says not ready, so `kubectl rollout status` means
// what it says. A connection's generation keeps a resync of an earlier
// connection from marking a later one synchronized.

// connState is the plugin's view of its connection to the runtime.
type connState struct {
	gen       uint64 // bumped at every Configure
	connected bool
	synced    bool
	runtime   string // the runtime's name and version, from Configure
	version   string
}

// RuntimeInfo is the name and version the runtime gave at its last
// Configure ("" before the first).
func (p *Plugin) RuntimeInfo() (name, version string) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.conn.runtime, p.conn.version
}

// Serving reports whether the plugin serves the runtime (connected and
// synchronized), and if not, why.
func (p *Plugin) Serving() (bool, string) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case !p.conn.connected:
		return false, "not connected to the runtime's NRI socket"
	case !p.conn.synced:
		return false, fmt.Sprintf("connected to %s %s; synchronizing with it (resync under way)", p.conn.runtime, p.conn.version)
	}
	return true, fmt.Sprintf("serving %s %s", p.conn.runtime, p.conn.version)
}

// Connected reports whether the plugin is connected to the runtime
// (configured; synchronized or not).
func (p *Plugin) Connected() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.conn.connected
}

// connected records a Configure (a new connection) and returns its
// generation.
func (p *Plugin) connected(runtime, version string) uint64 {
	p.mu.Lock()
	p.conn = connState{gen: p.conn.gen + 1, connected: true, runtime: runtime, version: version}
	gen := p.conn.gen
	p.mu.Unlock()
	p.connection(true)
	if p.OnRuntime != nil {
		p.OnRuntime(runtime, version)
	}
	return gen
}

// disconnected records the end of the connection.
func (p *Plugin) disconnected() {
	p.mu.Lock()
	p.conn.connected, p.conn.synced = false, false
	p.mu.Unlock()
	p.connection(false)
}

// synced marks connection gen synchronized, if it is still the current one.
func (p *Plugin) synced(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn.gen == gen && p.conn.connected {
		p.conn.synced = true
	}
}

// connGen is the current connection's generation.
func (p *Plugin) connGen() uint64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.conn.gen
}

// Synchronize hands the runtime's live pods and their running containers to
// a background resync (GC of what is gone, attach of what was missed, and a
// report of containers that started before their pod's networks) and
// answers at once: the resync runs CNI commands and must not hold up the
// runtime's request deadline. A container created before the resync reaches
// its pod is covered by CreateContainer. The connection counts as serving
// once the resync is done.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, containers []*api.Container) ([]*api.ContainerUpdate, error) {
	eng := p.Engine()
	if eng == nil {
		return nil, errNotConfigured
	}
	mgr := eng.Manager
	live := make([]attach.Sandbox, 0, len(pods))
	for _, pod := range pods {
		sb, _ := sandboxOf(pod)
		live = append(live, sb)
	}
	gen := p.connGen()
	p.mu.RLock()
	opts := reconcile.SyncOptions{AttachMissing: mgr.Config().SyncAttach, PidlessPods: pidlessRuntime(p.conn.runtime),
		ListedAt: time.Now().UTC(), Running: runningContainers(containers)}
	p.mu.RUnlock()
	p.log.WithFields(logrus.Fields{"pods": len(pods), "containers": len(containers), "syncAttach": opts.AttachMissing}).
		Info("synchronizing with the runtime")
	go func() {
		start := time.Now()
		res := eng.Resync.Sync(context.WithoutCancel(ctx), live, opts)
		reconcile.LogSync(p.log, res, time.Since(start))
		p.synced(gen)
	}()
	return nil, nil
}

// runningContainers are the runtime's running containers by sandbox id.
func runningContainers(containers []*api.Container) map[string][]reconcile.Container {
	out := map[string][]reconcile.Container{}
	for _, c := range containers {
		if c.GetState() != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		out[c.GetPodSandboxId()] = append(out[c.GetPodSandboxId()], reconcile.Container{ID: c.GetId(), Name: c.GetName(), Pid: c.GetPid()})
	}
	return out
}
