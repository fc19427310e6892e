package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
)

func TestSubscription(t *testing.T) {
	pod := []api.Event{api.Event_RUN_POD_SANDBOX, api.Event_STOP_POD_SANDBOX, api.Event_REMOVE_POD_SANDBOX, api.Event_CREATE_CONTAINER}
	for _, tc := range []struct {
		nri      string
		validate bool
	}{
		{"v0.12.3", true}, // containerd 2.4.2, CRI-O 1.36.3
		{"v0.12.5", true}, // failure policies too
		{"v0.10.0", true}, // the first with validation (containerd 2.2.0)
		{"v0.8.0", false}, // containerd 2.0, 2.1: the event would fail the registration
		{"v0.3.1-0.20230504231226-94185418e253", false},
		{"unknown", false}, // not said, not inferred: never risk the registration
		{"", false},
		{"devel", false},
	} {
		t.Run(tc.nri, func(t *testing.T) {
			m := subscription(tc.nri)
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
