package kube

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nri-cni/nri-cni/migrate"
	"github.com/nri-cni/nri-cni/plan"
)

// pagedPods answers pod lists as the API server pages them: at most Limit
// items, a continue token while more remain; it records the requests.
func pagedPods(pods []corev1.Pod, requests *[]metav1.ListOptions) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).ListOptions
		*requests = append(*requests, o)
		start := 0
		if o.Continue != "" {
			start, _ = strconv.Atoi(o.Continue)
		}
		end := min(start+int(o.Limit), len(pods))
		l := &corev1.PodList{Items: pods[start:end]}
		if end < len(pods) {
			l.Continue = strconv.Itoa(end)
		}
		return true, l, nil
	}
}

func TestReaderInventoryPagesAndKeepsOnlyWhatPlanningReads(t *testing.T) {
	annotated := func(name, value string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Annotations: map[string]string{
			plan.AnnotationNPWGNetworks: value, "kubectl.kubernetes.io/last-applied-configuration": "{…big…}",
			plan.AnnotationMAC: "02:00:00:00:00:01"}}}
	}
	var pods []corev1.Pod
	for i := range 7 {
		pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "plain-" + strconv.Itoa(i)}})
	}
	done := annotated("done", "storage")
	done.Status.Phase = corev1.PodSucceeded
	host := annotated("host", "storage")
	host.Spec.HostNetwork = true
	web := annotated("web", "storage, data@eth1")
	web.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}, {IP: "fd00:10::5"}}
	pods = append(pods, web, done, host)

	core := fake.NewClientset()
	var requests []metav1.ListOptions
	core.PrependReactor("list", "pods", pagedPods(pods, &requests))
	nads := newNADFake(t, nad("team-a", "storage", conflistA), nad("netdefs", "shared", ""))
	vf := nad("telco", "vf", singleB)
	vf.Annotations = map[string]string{migrate.AnnotationResourceName: "intel.com/sriov"}
	_, err := nads.K8sCniCncfIoV1().NetworkAttachmentDefinitions("telco").Create(context.Background(), vf, metav1.CreateOptions{})
	require.NoError(t, err)

	r := NewReaderFor(core, nads)
	r.PageSize = 4
	inv, err := r.Inventory(context.Background(), "")
	require.NoError(t, err)

	require.Len(t, requests, 3, "10 pods in pages of 4")
	for i, o := range requests {
		assert.Equal(t, int64(4), o.Limit)
		assert.Equal(t, []string{"", "4", "8"}[i], o.Continue)
	}
	assert.Equal(t, 10, inv.Listed)
	assert.Equal(t, 1, inv.Finished)
	assert.Equal(t, []migrate.Pod{
		{Namespace: "team-a", Name: "web", IPs: []string{"10.244.0.5", "fd00:10::5"}, Annotations: map[string]string{
			plan.AnnotationNPWGNetworks: "storage, data@eth1", plan.AnnotationMAC: "02:00:00:00:00:01"}},
		{Namespace: "team-a", Name: "host", HostNetwork: true, Annotations: map[string]string{
			plan.AnnotationNPWGNetworks: "storage", plan.AnnotationMAC: "02:00:00:00:00:01"}},
	}, inv.Pods, "finished pods dropped; annotations planning does not read dropped")
	assert.ElementsMatch(t, []migrate.NAD{
		{Namespace: "team-a", Name: "storage", Config: conflistA},
		{Namespace: "netdefs", Name: "shared"},
		{Namespace: "telco", Name: "vf", Config: singleB, ResourceName: "intel.com/sriov"},
	}, inv.NADs)
}

func TestReaderErrorsNameWhatWasRead(t *testing.T) {
	core := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "nri-cni"},
		Data: map[string]string{"nri.conf": "kubernetes: {}\n"}})
	r := NewReaderFor(core, newNADFake(t))
	data, err := r.ConfigMapData(context.Background(), "kube-system", "nri-cni")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"nri.conf": "kubernetes: {}\n"}, data)
	_, err = r.ConfigMapData(context.Background(), "kube-system", "nope")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ConfigMap kube-system/nope")

	core.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no list"))
	})
	_, err = r.Inventory(context.Background(), "")
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err))
	assert.Contains(t, err.Error(), "listing pods")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Inventory(ctx, "")
	assert.ErrorIs(t, err, context.Canceled)
}
