package kube

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nri-cni/nri-cni/migrate"
	"github.com/nri-cni/nri-cni/plan"
)

// TestReaderKeepsDefaultNetworkPods: a pod that asks Multus for another
// eth0 is read for the check without the NPWG annotation too, with that
// annotation kept.
func TestReaderKeepsDefaultNetworkPods(t *testing.T) {
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "calico", Annotations: map[string]string{
			plan.AnnotationMultusDefaultNetwork: "kube-system/calico", "other": "dropped"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "plain", Annotations: map[string]string{"other": "x"}}},
	}
	core := fake.NewClientset()
	var requests []metav1.ListOptions
	core.PrependReactor("list", "pods", pagedPods(pods, &requests))
	inv, err := NewReaderFor(core, newNADFake(t)).Inventory(context.Background(), "")
	require.NoError(t, err)
	assert.Equal(t, 2, inv.Listed)
	assert.Equal(t, []migrate.Pod{{Namespace: "team-a", Name: "calico",
		Annotations: map[string]string{plan.AnnotationMultusDefaultNetwork: "kube-system/calico"}}}, inv.Pods)
}
