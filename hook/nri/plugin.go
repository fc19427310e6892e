// Package nri is the NRI runtime adapter: it connects to containerd's
// or CRI-O's NRI socket (or is handed one when pre-launched), translates each
// pod event into an attach.Sandbox and hands it to the attachment engine.
// Each handler only translates, times and logs; the engine does the work.
// Idempotency: see package attach (Run twice attaches once; Stop/Remove
// repeat safely).
package nri

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/reconcile"
)

// Engine is the attachment engine and its resync, as the plugin drives them.
type Engine struct {
	Manager *attach.Manager
	Resync  *reconcile.Resyncer
}

// ConfigureFunc builds the engine from the runtime-supplied config string
// (a pre-launched plugin's only config source).
type ConfigureFunc func(ctx context.Context, config string) (*Engine, error)

// Plugin is the NRI plugin. It implements the stub's Configure,
// Synchronize, RunPodSandbox, StopPodSandbox, RemovePodSandbox and
// CreateContainer interfaces, and ValidateContainerAdjustment where the
// runtime has it (validate.go).
type Plugin struct {
	log       *logrus.Entry
	configure ConfigureFunc

	mu   sync.RWMutex // guards eng, conn and runtimeNRI
	eng  *Engine
	conn connState // serving.go
	// runtimeNRI is the connection's NRI version as the stub learnt it
	// at Configure (set by runOnce; validate.go).
	runtimeNRI func() string

	// OnConnection, if set, learns when the runtime connection is up
	// (configured) or gone. Set it before running the plugin.
	OnConnection func(up bool)
	// OnRuntime, if set, learns the runtime's name and version at every
	// Configure (the node's fail-closed check). It must return at once.
	OnRuntime func(name, version string)
	// Name and Idx are how the plugin registers with the runtime ("" when
	// unknown): a pod requires nri-cni by naming it (required.go).
	Name, Idx string
	// OnUnprotected, if set, learns of every pod that gets networks without
	// requiring nri-cni (the metric); it must return at once.
	OnUnprotected func()
	// NodeFailClosed, if set, says whether the node's runtime refuses the
	// containers of pods that require nri-cni while it is away; an
	// unprotected pod is then logged at warning level (else debug: the
	// node's own warning covers it).
	NodeFailClosed func() bool
	// Hook, when its Socket is set (and the plugin serves it, ServeAwait),
	// is added to containers whose pod's background attach still runs,
	// instead of waiting inside CreateContainer (await.go).
	Hook   Hook
	awaits awaits
	// Dial, if set, connects to the runtime's NRI socket in external mode
	// (nil: the stub's own dialer); the caller learns the runtime's process
	// from the connection (the node check).
	Dial func(socket string) (net.Conn, error)
}

func (p *Plugin) connection(up bool) {
	if p.OnConnection != nil {
		p.OnConnection(up)
	}
}

// New returns a plugin with a ready engine (external mode: config from a
// file), or with configure set (pre-launched: config from Configure).
func New(eng *Engine, configure ConfigureFunc, log *logrus.Entry) *Plugin {
	return &Plugin{eng: eng, configure: configure, log: log}
}

// Engine returns the current engine (nil until configured).
func (p *Plugin) Engine() *Engine {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.eng
}

// Manager returns the current attachment engine (nil until configured).
func (p *Plugin) Manager() *attach.Manager {
	if e := p.Engine(); e != nil {
		return e.Manager
	}
	return nil
}

// Configure handles the runtime's configuration. The subscription is
// every event the plugin implements that the runtime knows (validate.go).
func (p *Plugin) Configure(ctx context.Context, config, runtime, version string) (api.EventMask, error) {
	p.mu.RLock()
	nriVersion := "unknown"
	if p.runtimeNRI != nil {
		nriVersion = p.runtimeNRI()
	}
	p.mu.RUnlock()
	events := subscription(nriVersion, runtime, version)
	log := p.log.WithFields(logrus.Fields{"runtime": runtime, "version": version, "nri": nriVersion,
		"validator": events.IsSet(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)})
	if p.configure == nil {
		if config != "" {
			log.Warn("ignoring the runtime-supplied config: this plugin reads its own config file")
		}
		log.Info("connected to the runtime")
		p.connected(runtime, version)
		return events, nil
	}
	eng, err := p.configure(ctx, config)
	if err != nil {
		log.WithError(err).Error("configuration failed")
		return 0, err
	}
	p.mu.Lock()
	p.eng = eng
	p.mu.Unlock()
	log.Info("configured by the runtime")
	p.connected(runtime, version)
	return events, nil
}

var errNotConfigured = errors.New("nri-cni is not configured yet")

// pidlessRuntime reports whether the runtime hands NRI Pid 0 for pods it is
// running: CRI-O does for every pod whose infra container it dropped (the
// kubelet's default). containerd always reports the pause pid of a running
// sandbox.
func pidlessRuntime(name string) bool {
	n := strings.ToLower(name)
	return n == "cri-o" || n == "crio"
}

// RunPodSandbox attaches the configured networks. An error fails the pod,
// unless failurePolicy is "ignore".
func (p *Plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	sb, netnsPath := sandboxOf(pod)
	log := p.podLog(pod).WithField("event", "RunPodSandbox")
	if netnsPath == "" {
		log.Debug("no network namespace (host network): skipped")
		return nil
	}
	mgr := p.Manager()
	if mgr == nil {
		return errNotConfigured
	}
	if mgr.Config().BackgroundAttach {
		return p.startBackground(ctx, mgr, pod, sb, log)
	}
	start := time.Now()
	rec, err := mgr.Attach(ctx, sb)
	log = log.WithField("duration", time.Since(start).Round(time.Microsecond))
	if err != nil {
		return attachFailed(mgr, log, err)
	}
	if rec != nil {
		log.WithField("networks", len(rec.Networks)).Info("attached")
		p.checkProtected(pod, log)
	}
	return nil
}

// checkProtected warns when pod, which gets nri-cni's networks, does not
// require nri-cni: its containers would start without the networks if
// nri-cni were away (required.go).
func (p *Plugin) checkProtected(pod *api.PodSandbox, log *logrus.Entry) {
	if p.Name == "" || requires(pod.GetAnnotations(), p.Name, p.Idx) {
		return
	}
	if p.OnUnprotected != nil {
		p.OnUnprotected()
	}
	l := log.WithField("annotation", RequiredAnnotation)
	msg := "the pod gets networks but does not require nri-cni: while nri-cni is away its containers would start without them " +
		"(is deploy/base's required-plugins MutatingAdmissionPolicy installed?)"
	if p.NodeFailClosed != nil && p.NodeFailClosed() {
		l.Warn(msg)
		return
	}
	l.Debug(msg)
}

// CreateContainer makes sure the container's pod has its networks before the
// container is created. A pod created while nri-cni was away started without
// them (the runtime's NRI validator, if it requires nri-cni, refuses
// containers, not sandboxes); the resync attaches it in the background, and
// if a container comes first, it is attached here (EnsureAttached). The
// common case is one record lookup. It never adjusts the container. An error
// fails the container's creation (the kubelet retries).
//
// With failurePolicy "ignore" it does nothing: pods may run without nri-cni's
// networks by choice, and a failing network would otherwise be retried (and
// waited for, under the runtime's node-wide NRI lock) at every container
// creation of every pod it failed.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	sb, netnsPath := sandboxOf(pod)
	if netnsPath == "" {
		return nil, nil, nil
	}
	mgr := p.Manager()
	if mgr == nil {
		return nil, nil, errNotConfigured
	}
	if mgr.Config().FailurePolicy == config.FailurePolicyIgnore {
		return nil, nil, nil
	}
	start := time.Now()
	p.mu.RLock()
	pidless := pidlessRuntime(p.conn.runtime)
	p.mu.RUnlock()
	if mgr.Config().BackgroundAttach && p.Hook.Socket != "" {
		adj, handled, err := p.hookFor(mgr, sb, pidless)
		log := p.podLog(pod).WithFields(logrus.Fields{"event": "CreateContainer", "container": ctr.GetName()})
		switch {
		case err != nil:
			log.WithError(err).Error("the pod's attach failed: the container is not created (the kubelet retries)")
			return nil, nil, err
		case handled:
			log.Debug("the pod's attach still runs: the container waits for it in the await hook")
			return adj, nil, nil
		}
	}
	if mgr.Config().BackgroundAttach {
		return nil, nil, p.waitBackground(ctx, mgr, pod, ctr, sb, pidless, start)
	}
	rec, err := mgr.EnsureAttached(ctx, sb, pidless)
	if err == nil && rec == nil {
		return nil, nil, nil
	}
	log := p.podLog(pod).WithFields(logrus.Fields{"event": "CreateContainer", "container": ctr.GetName(),
		"duration": time.Since(start).Round(time.Microsecond)})
	if err != nil {
		log.WithError(err).Error("attach failed: the container is not created")
		return nil, nil, err
	}
	log.WithField("networks", len(rec.Networks)).Info("attached before the pod's first container (pod created while nri-cni was away)")
	return nil, nil, nil
}

// waitBackground (backgroundAttach) waits for the pod's background attach,
// starting one first if the pod has none in flight and needs one (its
// attach failed and was reported, or it was created while nri-cni was
// away): no container of the pod is created before its networks are there.
// Its error refuses the container; the kubelet retries.
func (p *Plugin) waitBackground(ctx context.Context, mgr *attach.Manager, pod *api.PodSandbox, ctr *api.Container,
	sb attach.Sandbox, pidless bool, start time.Time) error {
	found, err := mgr.Background().Wait(ctx, sb.ID)
	if !found && err == nil {
		var started bool
		if started, err = mgr.Background().Ensure(ctx, sb, pidless); started {
			found, err = mgr.Background().Wait(ctx, sb.ID)
		}
	}
	if err != nil {
		p.podLog(pod).WithFields(logrus.Fields{"event": "CreateContainer", "container": ctr.GetName(),
			"duration": time.Since(start).Round(time.Microsecond)}).WithError(err).
			Error("the pod's attach failed or is not done: the container is not created (the kubelet retries)")
		return err
	}
	if found {
		p.podLog(pod).WithFields(logrus.Fields{"event": "CreateContainer", "container": ctr.GetName(),
			"duration": time.Since(start).Round(time.Microsecond)}).Debug("the pod's attach was waited for")
	}
	return nil
}

// startBackground plans the pod now (a wrong request fails the sandbox at
// once, as an attach in line would) and hands the attach to the engine's
// background (backgroundAttach): the runtime is answered without waiting
// for the CNI chains, and the pod's first CreateContainer waits for them.
func (p *Plugin) startBackground(ctx context.Context, mgr *attach.Manager, pod *api.PodSandbox, sb attach.Sandbox, log *logrus.Entry) error {
	skip, err := mgr.Background().PlanFirst(ctx, sb)
	if err != nil {
		return attachFailed(mgr, log, err)
	}
	if skip {
		return nil // logged with the reason
	}
	if mgr.Background().Start(sb) {
		log.Debug("attach started in the background")
	}
	p.checkProtected(pod, log)
	return nil
}

// attachFailed logs a failed RunPodSandbox attach and returns what the
// runtime gets: the error, or nil with failurePolicy "ignore" (the pod
// starts without nri-cni's networks).
func attachFailed(mgr *attach.Manager, log *logrus.Entry, err error) error {
	if mgr.Config().FailurePolicy == config.FailurePolicyIgnore {
		log.WithError(err).Error("attach failed; failurePolicy ignore: the pod starts without nri-cni's networks")
		return nil
	}
	log.WithError(err).Error("attach failed")
	return err
}

// StopPodSandbox DELs the pod's networks while its netns still exists
// (containerd), or with an empty netns (CRI-O removed it already).
//
// Stop and Remove never fail the runtime's request: CRI-O hands a Stop error
// back to the kubelet, which retries Stop and cannot delete the pod while a
// DEL keeps failing (containerd only logs it). A failed teardown is logged,
// its record kept, and it is retried in the background with backoff.
func (p *Plugin) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return p.detach(ctx, pod, false, "StopPodSandbox")
}

// RemovePodSandbox DELs what is left, best-effort, and drops the record.
func (p *Plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return p.detach(ctx, pod, true, "RemovePodSandbox")
}

func (p *Plugin) detach(ctx context.Context, pod *api.PodSandbox, final bool, event string) error {
	mgr := p.Manager()
	if mgr == nil {
		return errNotConfigured
	}
	sb, _ := sandboxOf(pod)
	p.awaits.forget(sb.ID)
	log := p.podLog(pod).WithField("event", event)
	start := time.Now()
	err := mgr.Detach(ctx, sb, final)
	log = log.WithField("duration", time.Since(start).Round(time.Microsecond))
	switch {
	case errors.Is(err, attach.ErrTeardownContinues):
		log.Info("the teardown goes on past the runtime's deadline, in the pod's network namespace (held open)")
		return nil
	case err != nil:
		log.WithError(err).Error("teardown failed: the record is kept and the teardown retried in the background; the pod's deletion goes on")
		return nil
	}
	log.Debug("detach done")
	return nil
}

func (p *Plugin) podLog(pod *api.PodSandbox) *logrus.Entry {
	return p.log.WithFields(logrus.Fields{"pod": pod.GetName(), "namespace": pod.GetNamespace(), "sandbox": pod.GetId()})
}

// sandboxOf translates an NRI pod. netnsPath is the pinned network namespace
// path; "" means the pod has none (host network).
func sandboxOf(pod *api.PodSandbox) (attach.Sandbox, string) {
	var netnsPath string
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			netnsPath = ns.GetPath()
		}
	}
	return attach.Sandbox{
		ID:   pod.GetId(),
		Kind: "pod",
		Pod: cni.PodIdentity{
			Namespace: pod.GetNamespace(),
			Name:      pod.GetName(),
			UID:       pod.GetUid(),
			InfraID:   pod.GetId(),
		},
		Pid:         pod.GetPid(),
		Pinned:      netnsPath,
		Annotations: pod.GetAnnotations(),
		IPs:         pod.GetIps(),
		Labels:      podLabels(pod.GetLabels()),
	}, netnsPath
}

// kubeletLabels is the prefix of the labels the kubelet adds to a CRI
// sandbox (io.kubernetes.pod.name, .namespace, .uid): not the pod's.
const kubeletLabels = "io.kubernetes.pod."

// podLabels are the pod's own labels among a CRI sandbox's (the kubelet
// copies the pod's and adds its own); nil when none is left.
func podLabels(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, kubeletLabels) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(in))
		}
		out[k] = v
	}
	return out
}
