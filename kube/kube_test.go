package kube

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// NewClientsFor tunes a copy of the config it is handed (user agent, the
// kubelet's QPS and burst), as NewClients does with the credentials it
// reads, and needs a node name.
func TestNewClientsFor(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "t", QPS: 5, Burst: 10}
	c, err := NewClientsFor(rc, "node-1")
	require.NoError(t, err)
	assert.Equal(t, "node-1", c.NodeName)
	assert.Equal(t, rc.Host, c.Host)
	assert.NotNil(t, c.Core)
	assert.NotNil(t, c.NAD)
	assert.Equal(t, float32(5), rc.QPS, "the caller's config is not changed")
	assert.Empty(t, rc.UserAgent)

	_, err = NewClientsFor(rc, "")
	assert.ErrorIs(t, err, ErrNoNodeName)
}
