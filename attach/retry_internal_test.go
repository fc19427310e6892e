package attach

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/nri-cni/nri-cni/cni"
)

func TestRetryBackoffDoublesUpToTheCap(t *testing.T) {
	var r retries
	now := time.Unix(1000, 0)
	var got []time.Duration
	for i := 0; i < 12; i++ {
		got = append(got, r.failed(Sandbox{ID: "p", Kind: "pod", Pod: cni.PodIdentity{Name: "p"}}, false, now))
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, retryMax, retryMax, retryMax}, got)
	assert.Empty(t, r.due(now.Add(retryMax-time.Second)))
	assert.Len(t, r.due(now.Add(retryMax)), 1)
	r.done("p")
	assert.Zero(t, r.count())
}
