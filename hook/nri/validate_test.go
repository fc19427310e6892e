package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
)

func TestSubscription(t *testing.T) {
	pod := []api.Event{api.Event_RUN_POD_SANDBOX, api.Event_STOP_POD_SANDBOX, api.Event_REMOVE_POD_SANDBOX, api.Event_CREATE_CONTAINER}
	for _, tc := range []struct {
		nri, runtime, version string
		validate              bool
	}{
		{"v0.12.3", "containerd", "2.4.2+unknown", true}, // containerd 2.4.2 says its NRI
		{"v0.12.5", "containerd", "", true},              // failure policies too
		{"v0.10.0", "containerd", "", true},              // the first with validation (containerd 2.2.0)
		{"v0.8.0", "containerd", "2.1.4", false},         // containerd 2.0, 2.1: the event would fail the registration
		{"v0.3.1-0.20230504231226-94185418e253", "cri-o", "1.27.4", false},
		{"", "cri-o", "1.36.3", true},  // CRI-O 1.36.3 says no NRI version, and NRI's table does not know it
		{"", "cri-o", "1.34.0", true},  // the first CRI-O with the default validator
		{"", "cri-o", "1.33.2", false}, // older: no
		{"", "CRI-O", "v1.35.1", true}, // as a runtime may spell them
		{"", "containerd", "2.2.0", true},
		{"", "containerd", "2.1.4", false},
		{"unknown", "", "", false},     // not said, not inferred: never risk the registration
		{"", "podman", "5.0.0", false}, // a runtime nri-cni does not know
		{"devel", "cri-o", "junk", false},
	} {
		t.Run(tc.nri+" "+tc.runtime+" "+tc.version, func(t *testing.T) {
			m := subscription(tc.nri, tc.runtime, tc.version)
			for _, e := range pod {
				assert.True(t, m.IsSet(e), "%v", e)
			}
			assert.Equal(t, tc.validate, m.IsSet(api.Event_VALIDATE_CONTAINER_ADJUSTMENT))
			assert.Zero(t, m&^api.ValidEvents, "only events NRI defines")
		})
	}
}

func TestFailurePolicyFailsTheRequest(t *testing.T) {
	assert.True(t, failurePolicy().GetFailRequest(), "a request nri-cni could not handle fails, not goes on without it")
	assert.False(t, failurePolicy().GetKeepConnected(), "a timed-out nri-cni is dropped and reconnects, as before")
}
