package kube

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/nadpolicy"
	"github.com/nri-cni/nri-cni/plan"
)

// TestNADSourceCachesAtMostMaxBytes: the CRD sets no maxLength and the
// admission policy may only warn, so the API server can hold NADs of any
// size; each node's cache keeps at most maxBytes+1 bytes of a config (and
// no second copy of it in kubectl's last-applied-configuration, nor the
// managed fields), and such a NAD is refused by its real size, as before.
// The annotation recording that size is the cache's own: one an author
// sets is dropped.
func TestNADSourceCachesAtMostMaxBytes(t *testing.T) {
	const maxBytes = 1024
	huge := `{"cniVersion":"1.0.0","name":"huge","type":"tuning","pad":"` + strings.Repeat("x", 200_000) + `"}`
	big := nad("ns1", "huge", huge)
	big.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: `{"spec":{"config":"` + strings.Repeat("x", 200_000) + `"}}`,
		"team": "a"}
	big.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	liar := nad("ns1", "a", conflistA)
	liar.Annotations = map[string]string{configBytesAnnotation: "999999"}
	src := runSourceWith(t, newNADFake(t, big, liar), testPolicy(t), maxBytes)

	cached, err := src.lister.NetworkAttachmentDefinitions("ns1").Get("huge")
	require.NoError(t, err)
	assert.Len(t, cached.Spec.Config, maxBytes+1, "the cache keeps the config's first maxBytes+1 bytes")
	assert.Equal(t, huge[:maxBytes+1], cached.Spec.Config)
	size := strconv.Itoa(len(huge))
	assert.Equal(t, map[string]string{configBytesAnnotation: size, "team": "a"}, cached.Annotations,
		"its real size; no last-applied copy; other annotations kept")
	assert.Nil(t, cached.ManagedFields)

	_, err = src.Network(plan.NADRef{Namespace: "ns1", Name: "huge"})
	require.Error(t, err)
	assert.ErrorIs(t, err, plan.ErrBadNAD)
	assert.ErrorIs(t, err, nadpolicy.ErrRefused)
	assert.Contains(t, err.Error(), "ns1/huge")
	assert.Contains(t, err.Error(), "spec.config: is "+size+" bytes, more than 1024 (kubernetes.maxNADConfigBytes")

	n, err := src.Network(plan.NADRef{Namespace: "ns1", Name: "a"})
	require.NoError(t, err, "an author's size annotation means nothing")
	assert.Equal(t, "net-a", n.Name)
	cachedA, err := src.lister.NetworkAttachmentDefinitions("ns1").Get("a")
	require.NoError(t, err)
	assert.NotContains(t, cachedA.Annotations, configBytesAnnotation)
	assert.Equal(t, conflistA, cachedA.Spec.Config, "a config within the limit is kept whole")
}
