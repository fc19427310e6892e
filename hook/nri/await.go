package nri

// The await hook (failClosed.hookSocket, with backgroundAttach). The
// runtime counts a plugin present for its NRI validator when it sends it a
// request, not when the plugin answers: if nri-cni died (or overran the
// request deadline) while CreateContainer waited for the pod's attach, the
// runtime would create the container without the pod's networks. So
// CreateContainer never waits: when the pod's attach is still running, it
// answers at once and adds an OCI createRuntime hook to the container —
// `nri-cni await` — which the runtime (runc) runs before the container's
// process starts, outside NRI. The hook asks nri-cni on a unix socket and
// returns only once the pod is attached (a nri-cni restarted meanwhile
// finishes the attach at its resync); a failed attach or its timeout fails
// the container's start, and the kubelet retries it. The request in which
// nri-cni adds the hook can itself be cut short; validate.go closes that.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/state"
)

// Hook describes the await hook the plugin adds to containers: the binary
// the runtime runs and the socket it asks on (host paths), and its bound.
type Hook struct {
	Path, Socket string
	Timeout      time.Duration
	// Runnable, if set, says why the runtime could not run Path now (nil:
	// it can): a binary missing or not executable on the node would fail
	// every container it is added to (StartError), so none is handed out
	// then; the container waits for its pod's attach inside CreateContainer,
	// as with the hook off, and the readiness probe says why.
	Runnable func() error
}

// maxAwaitRequest bounds a request line ("await <id> <ms>").
const maxAwaitRequest = 256

// maxExpected bounds the sandboxes remembered for the hook (one entry per
// pod whose container got the hook; dropped at its answer or the pod's
// Stop).
const maxExpected = 4096

// expected is a sandbox whose container got the hook, as CreateContainer
// saw it: what is needed to start its attach again if it failed meanwhile.
type expected struct {
	sb      attach.Sandbox
	pidless bool
}

// awaits are the sandboxes the plugin expects the hook to ask about.
type awaits struct {
	mu sync.Mutex
	m  map[string]expected
}

func (a *awaits) put(sb attach.Sandbox, pidless bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]expected{}
	}
	if len(a.m) >= maxExpected {
		for k := range a.m { // full (hooks that never ran): forget one
			delete(a.m, k)
			break
		}
	}
	a.m[sb.ID] = expected{sb: sb, pidless: pidless}
}

func (a *awaits) get(id string) (expected, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[id]
	return e, ok
}

func (a *awaits) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, id)
}

// hookAdjustment adds the await hook for sandbox id to a container.
func (h Hook) adjustment(id string) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	// The OCI timeout is the runtime's backstop; the hook ends itself first.
	timeout := int(h.Timeout/time.Second) + 15
	adj.AddHooks(&api.Hooks{CreateRuntime: []*api.Hook{{
		Path: h.Path,
		Args: []string{filepath.Base(h.Path), "await", "--socket", h.Socket, "--sandbox", id,
			"--timeout", h.Timeout.String()},
		Timeout: &api.OptionalInt{Value: int64(timeout)},
	}}})
	return adj
}

// hookFor answers CreateContainer, with the hook on, for a pod whose
// attach RunPodSandbox started in the background and that still runs: the
// await hook, at once (handled is true). Otherwise (handled false) the
// caller goes on as without the hook: a failed attach is the container's
// error (CreateContainerError: the kubelet retries it every 10-15 s, with
// no restart counted), and an attach the container itself has to start (a
// retry, a pod created while nri-cni was away) is waited for in the call.
func (p *Plugin) hookFor(mgr *attach.Manager, sb attach.Sandbox, pidless bool) (adj *api.ContainerAdjustment, handled bool, err error) {
	pending, err := mgr.Background().Poll(sb.ID)
	if err != nil || !pending {
		return nil, err != nil, err
	}
	if p.Hook.Runnable != nil && p.Hook.Runnable() != nil {
		return nil, false, nil // waited for in CreateContainer instead
	}
	p.awaits.put(sb, pidless)
	return p.Hook.adjustment(sb.ID), true, nil
}

// ServeAwait answers the await hook on socket (a unix socket, mode 0600,
// replacing a stale one) until ctx ends.
func (p *Plugin) ServeAwait(ctx context.Context, socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return fmt.Errorf("await hook socket: %w", err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("await hook socket: %w", err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("await hook socket: %w", err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("await hook socket: %w", err)
	}
	go func() { <-ctx.Done(); l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serveAwait(ctx, c)
		}
	}()
	return nil
}

// serveAwait answers one hook: "await <sandbox id> <timeout ms>\n" →
// "ok\n" or "error <message>\n".
func (p *Plugin) serveAwait(ctx context.Context, c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReaderSize(c, maxAwaitRequest).ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		fmt.Fprintf(c, "error request too long\n")
		return
	}
	if err != nil {
		return
	}
	f := strings.Fields(string(line))
	var ms int64
	if len(f) == 3 && f[0] == "await" {
		ms, err = strconv.ParseInt(f[2], 10, 64)
	}
	if len(f) != 3 || f[0] != "await" || err != nil || ms <= 0 || ms > int64(10*time.Minute/time.Millisecond) {
		fmt.Fprintf(c, "error bad request\n")
		return
	}
	id := f[1]
	if err := state.ValidID(id); err != nil {
		fmt.Fprintf(c, "error %v\n", err)
		return
	}
	actx, cancel := context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = p.awaitAttach(actx, id)
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	log := p.log.WithFields(logrus.Fields{"sandbox": id, "event": "await hook", "duration": time.Since(start).Round(time.Millisecond)})
	if err != nil {
		log.WithError(err).Warn("the container's start is refused: its pod's networks are not attached (the kubelet retries)")
		fmt.Fprintf(c, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	log.Debug("the pod is attached: the container starts")
	fmt.Fprintf(c, "ok\n")
}

// awaitAttach returns once sandbox id is attached (or turns out to get
// nothing), or the error of its attach, or ctx's end.
func (p *Plugin) awaitAttach(ctx context.Context, id string) error {
	defer p.awaits.forget(id)
	for {
		if mgr := p.Manager(); mgr != nil {
			done, err := p.awaitStep(ctx, mgr, id)
			if done || err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s: its networks are not attached yet (gave up waiting)", id)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// awaitStep is one look at sandbox id: done when attached or nothing is to
// be attached; an attach in flight is waited for.
func (p *Plugin) awaitStep(ctx context.Context, mgr *attach.Manager, id string) (bool, error) {
	rec, err := mgr.Record(id)
	switch {
	case err == nil && rec.Phase == state.PhaseAttached:
		return true, nil
	case err != nil && !errors.Is(err, state.ErrNotFound):
		return false, err
	}
	// The container fails to start at ctx's deadline: an attach still
	// queued behind other namespaces' is run in time (attach.Background.Urgent).
	if d, ok := ctx.Deadline(); ok {
		mgr.Background().Urgent(id, d)
	}
	found, err := mgr.Background().Wait(ctx, id)
	switch {
	case errors.Is(err, attach.ErrAttachPending):
		return false, nil
	case err != nil:
		return false, err
	case found:
		return true, nil // ended well: attached, or nothing to attach (a host-network pod)
	}
	e, ok := p.awaits.get(id)
	if !ok {
		return false, nil // a restarted nri-cni: its resync attaches the pod
	}
	// The attach RunPodSandbox started is no longer in flight: it ended
	// well (a successful background attach forgets itself, attached or
	// with nothing to attach) or its failure was collected. Ensure starts
	// it again unless it is known; its outcome is waited for at once, as an
	// attach that ends with nothing to attach (a host-network pod) leaves no
	// record to find on the next look.
	started, err := mgr.Background().Ensure(ctx, e.sb, e.pidless)
	if err != nil {
		return false, err
	}
	if !started {
		// Nothing to start: attached meanwhile, or nothing to attach.
		rec, err = mgr.Record(id)
		return errors.Is(err, state.ErrNotFound) || err == nil && rec.Phase == state.PhaseAttached, nil
	}
	if d, ok := ctx.Deadline(); ok {
		mgr.Background().Urgent(id, d)
	}
	_, err = mgr.Background().Wait(ctx, id)
	switch {
	case errors.Is(err, attach.ErrAttachPending):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil // ended well (found or already forgotten: only a success forgets itself)
}
