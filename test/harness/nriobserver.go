package harness

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// PodEvent is one pod event as an NRI plugin received it.
type PodEvent struct {
	Event      string // Synchronize, RunPodSandbox, StopPodSandbox, RemovePodSandbox
	PodID      string
	Name       string
	Pid        uint32
	Namespaces map[string]string // type -> path, as sent
	// NetnsExists: the network namespace path existed when the event
	// arrived ("" path: false). NetnsIsHost: it was the observer's own
	// (the host's) network namespace.
	NetnsExists bool
	NetnsIsHost bool
}

// Observer is an in-process external NRI plugin that records pod events,
// to see what a runtime sends (pid, namespaces, order) without nri-cni.
type Observer struct {
	stub   stub.Stub
	mu     sync.Mutex
	events []PodEvent
	done   chan struct{}
}

// StartObserver connects an observer named idx-name to the NRI socket and
// returns once it is registered (wait for rt.PluginSynced(idx+"-"+name) to
// know it is synchronized).
func StartObserver(ctx context.Context, socket, name, idx string) (*Observer, error) {
	o := &Observer{done: make(chan struct{})}
	s, err := stub.New(o, stub.WithPluginName(name), stub.WithPluginIdx(idx), stub.WithSocketPath(socket),
		stub.WithOnClose(func() { close(o.done) }))
	if err != nil {
		return nil, fmt.Errorf("NRI observer stub: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return nil, fmt.Errorf("NRI observer on %s: %w", socket, err)
	}
	o.stub = s
	return o, nil
}

// Stop disconnects the observer.
func (o *Observer) Stop() { o.stub.Stop() }

// Events returns a copy of what was recorded so far.
func (o *Observer) Events() []PodEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]PodEvent(nil), o.events...)
}

// Of returns the recorded events of one pod, in order.
func (o *Observer) Of(podID string) []PodEvent {
	var out []PodEvent
	for _, e := range o.Events() {
		if e.PodID == podID {
			out = append(out, e)
		}
	}
	return out
}

func (o *Observer) record(event string, pod *api.PodSandbox) {
	e := PodEvent{Event: event, PodID: pod.GetId(), Name: pod.GetName(), Pid: pod.GetPid(), Namespaces: map[string]string{}}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		e.Namespaces[ns.GetType()] = ns.GetPath()
	}
	if p := e.Namespaces["network"]; p != "" {
		st, err := os.Stat(p)
		e.NetnsExists = err == nil
		if self, errSelf := os.Stat("/proc/self/ns/net"); err == nil && errSelf == nil {
			e.NetnsIsHost = os.SameFile(st, self)
		}
	}
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}

// Synchronize implements stub.SynchronizeInterface.
func (o *Observer) Synchronize(_ context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	for _, p := range pods {
		o.record("Synchronize", p)
	}
	return nil, nil
}

// RunPodSandbox implements stub.RunPodInterface.
func (o *Observer) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	o.record("RunPodSandbox", pod)
	return nil
}

// StopPodSandbox implements stub.StopPodInterface.
func (o *Observer) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	o.record("StopPodSandbox", pod)
	return nil
}

// RemovePodSandbox implements stub.RemovePodInterface.
func (o *Observer) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	o.record("RemovePodSandbox", pod)
	return nil
}
