package nri

// Closing the runtime's window on a plugin that dies mid-request.
//
// NRI's runtime side (containerd 2.4.2 and CRI-O 1.36.3 vendor
// containerd/nri v0.12.3) counts a plugin as having processed a container
// when it sends it CreateContainer, before the answer. If the plugin dies
// during that request (SIGKILL, OOM, a crash) or overruns the request
// deadline, the runtime closes it and creates the container without its
// adjustment: without nri-cni's await hook, for a pod whose attach is still
// running, the container's process starts without the pod's networks, and
// the default validator's required-plugins check passes it, since nri-cni
// was "present". Seen: 1 of 20 pods of a storm started once without net1
// when nri-cni was SIGKILLed mid-storm (test/k8s TestFailClosedKilledMidStorm).
//
// Two answers, one per kind of runtime:
//   - nri-cni also subscribes to ValidateContainerAdjustment (runtimes with
//     NRI v0.10.0 or later: containerd 2.2+, CRI-O 1.34+). Those runtimes (v0.12.3) call every registered
//     validator after the CreateContainer round, also one they have just
//     closed, and refuse the container when a validator's call fails. A
//     nri-cni that died or overran during CreateContainer is closed by then,
//     so its validator call fails and the container is refused; the kubelet
//     retries it and meets either the default validator (nri-cni away) or
//     nri-cni back. The handler itself accepts: its work is to be asked.
//   - The failure policy FailRequest (NRI v0.12.5's plugin API) asks a
//     runtime that honours it to fail the request instead of going on
//     without the plugin; those runtimes skip a closed validator, so this is
//     what covers them. Older runtimes ignore the field.

import (
	"context"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/mod/semver"
)

// validationSince is the first NRI version with container adjustment
// validation; a runtime with an older one refuses a plugin subscribing to
// an event it does not know.
const validationSince = "v0.10.0"

// failurePolicy is what the plugin asks of a runtime that honours failure
// policies: a request nri-cni could not handle (lost connection, deadline)
// fails instead of going on without nri-cni.
func failurePolicy() *api.FailurePolicy {
	return &api.FailurePolicy{FailRequest: true}
}

// validationRuntimes are the first releases of each runtime whose NRI has
// adjustment validation (and the default validator): for a runtime that
// does not say its NRI version (CRI-O 1.36.3 sends none, and NRI's own
// table of runtime versions does not know it).
var validationRuntimes = map[string]string{"containerd": "v2.2.0", "cri-o": "v1.34.0"}

// subscription is the events the plugin subscribes to on a runtime with
// NRI version runtimeNRI ("" or "unknown" when the runtime did not say and
// its version did not tell) whose name and version are runtime and
// version: the pod events, CreateContainer, and ValidateContainerAdjustment
// where the runtime knows it.
func subscription(runtimeNRI, runtime, version string) api.EventMask {
	var m api.EventMask
	m.Set(api.Event_RUN_POD_SANDBOX, api.Event_STOP_POD_SANDBOX, api.Event_REMOVE_POD_SANDBOX, api.Event_CREATE_CONTAINER)
	if validates(runtimeNRI, runtime, version) {
		m.Set(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	}
	return m
}

// validates reports whether a runtime has adjustment validation: by its
// NRI version if it said one, else by its own version (unknown runtimes
// and versions: no, never risk the registration).
func validates(nriVersion, runtime, version string) bool {
	if semver.IsValid(nriVersion) {
		return semver.Compare(nriVersion, validationSince) >= 0
	}
	since, ok := validationRuntimes[strings.ToLower(runtime)]
	v := "v" + strings.TrimPrefix(version, "v")
	return ok && semver.IsValid(v) && semver.Compare(v, since) >= 0
}

// ValidateContainerAdjustment accepts every container: the runtime asking
// a live nri-cni is the check (see the top of this file).
func (p *Plugin) ValidateContainerAdjustment(context.Context, *api.ValidateContainerAdjustmentRequest) error {
	return nil
}
