package hook

// EnsureAttached: the CreateContainer side of fail-closed. With nri-cni
// required by the runtime's NRI validator, a container can only be created
// while nri-cni is connected, and containerd sends nri-cni its CreateContainer
// first. A pod created while nri-cni was away has no record yet (the resync
// after the reconnect attaches it in the background): its networks are
// attached here, inside the request, so no container of it starts without
// them. Contract: a pod with a record (any phase) is never attached again; at
// most one ADD per pod, whoever comes first (Run, the resync, CreateContainer).

import (
	"context"
	"errors"
	"fmt"

	"github.com/nri-cni/nri-cni/state"
)

// ErrBusy: another operation on the pod (the resync's GC or attach, a
// teardown) did not end in time for the runtime's request. The runtime's
// caller retries (the kubelet retries CreateContainer).
var ErrBusy = errors.New("another nri-cni operation on this pod is still running; retry")

// EnsureAttached attaches sb's networks if nri-cni has no record of it and it
// should get some (the same rules as Run), when a container of it is about
// to be created. It returns the new record when it attached now, and nil, nil
// when there was nothing to do: the pod is known (any phase), gets no
// networks, or has no network namespace. The common case costs one record
// lookup (plus, for pods without a record, the in-memory selection rules).
//
// Only sandboxes the runtime is running are attached (the resync's rule,
// Manager.running; pidless as in SyncOptions.PidlessPods); another one is an
// error. Waiting for another operation on the pod ends before ctx's deadline
// minus the margin, with ErrBusy: the runtime must get its answer in time.
func (m *Manager) EnsureAttached(ctx context.Context, sb Sandbox, pidless bool) (*state.Record, error) {
	if sb.Pinned == "" {
		return nil, nil // no network namespace of its own (host network)
	}
	if err := state.ValidID(sb.ID); err != nil {
		return nil, err
	}
	if _, err := m.store.Get(sb.ID); !errors.Is(err, state.ErrNotFound) {
		// A record, or an unreadable one: known, as for AttachIfAbsent.
		return nil, nil
	}
	if _, skip, err := m.plan(ctx, sb); err == nil && skip != "" {
		return nil, nil // filtered out, opted out, or not asking (requireAnnotation)
	}
	if err := m.running(sb, pidless); err != nil {
		return nil, fmt.Errorf("%s: not attaching: %w", podRef(sb), err)
	}
	unlock, err := m.lockWithin(ctx, sb.ID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", podRef(sb), err)
	}
	rec, err := m.attachLocked(ctx, sb, true, unlock)
	if errors.Is(err, ErrKnown) {
		return nil, nil // attached meanwhile (Run or the resync)
	}
	return rec, err
}
