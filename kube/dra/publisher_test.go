package dra

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nri-cni/nri-cni/config"
)

// PublishOnly: the driver publishes its node's pool through a ResourceSlice
// controller of its own, without a kubelet: the slice is the node's, owned
// by its Node, in the pool named after it, with the inventory's devices; a
// changed inventory is published again; Stop leaves the slice.
func TestPublishOnly(t *testing.T) {
	d, _, _ := newDriver(t, config.SharingMultiple)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid"}}
	client := fake.NewClientset(node)
	d.o.Client, d.o.PublishOnly = client, true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, d.Start(ctx))

	slice := func() *resourceapi.ResourceSlice {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		if len(l.Items) != 1 {
			return nil
		}
		return &l.Items[0]
	}
	require.Eventually(t, func() bool { return slice() != nil }, 30*time.Second, 20*time.Millisecond, "one slice published")
	s := slice()
	assert.Equal(t, DriverName, s.Spec.Driver)
	assert.Equal(t, "node-1", *s.Spec.NodeName)
	assert.Equal(t, "node-1", s.Spec.Pool.Name)
	require.Len(t, s.OwnerReferences, 1)
	assert.Equal(t, node.UID, s.OwnerReferences[0].UID, "owned by its Node")
	require.Len(t, s.Spec.Devices, 1)
	assert.Equal(t, DeviceName("alpha"), s.Spec.Devices[0].Name)

	// Slots instead of one shared device: republished.
	d.mu.Lock()
	d.multiple = false
	d.mu.Unlock()
	require.True(t, d.refresh())
	require.NoError(t, d.publish(ctx))
	require.Eventually(t, func() bool { s := slice(); return s != nil && len(s.Spec.Devices) == 16 }, 30*time.Second, 20*time.Millisecond)

	d.pub.Stop()
	assert.NotNil(t, slice(), "stopping leaves the slice (the Node owns it)")
}

// With WaitFor (the NAD cache's first list), the first publish has the
// NADs already: one create, no update; a wait that never ends is cut at
// WaitTimeout and the node's networks go out.
func TestFirstPublishWaitsForTheNADs(t *testing.T) {
	beta := net(t, "beta", `{"type":"bridge","bridge":"nad-b","ipam":{"type":"host-local","subnet":"10.2.0.0/24"}}`)
	for _, tc := range []struct {
		name    string
		synced  bool // WaitFor returns once the cache synced; else never
		devices int
	}{
		{"cache synced", true, 2},
		{"cache never synced", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _, _ := newDriver(t, config.SharingMultiple)
			alpha := d.o.Candidates()[0]
			var synced atomic.Bool
			d.o.Candidates = func() []Candidate {
				if synced.Load() {
					return []Candidate{alpha, {Network: "ns1/beta", Namespace: "ns1", Net: beta}}
				}
				return []Candidate{alpha}
			}
			d.o.WaitFor = func(ctx context.Context) error {
				if !tc.synced {
					<-ctx.Done()
					return ctx.Err()
				}
				time.Sleep(50 * time.Millisecond)
				synced.Store(true)
				return nil
			}
			d.o.WaitTimeout = 200 * time.Millisecond
			client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid"}})
			d.o.Client, d.o.PublishOnly = client, true
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			require.NoError(t, d.Start(ctx))
			require.Eventually(t, func() bool {
				l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
				return err == nil && len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == tc.devices
			}, 30*time.Second, 20*time.Millisecond)
			time.Sleep(200 * time.Millisecond)
			writes := map[string]int{}
			for _, a := range client.Actions() {
				if a.GetResource().Resource == "resourceslices" && (a.GetVerb() == "create" || a.GetVerb() == "update") {
					writes[a.GetVerb()]++
				}
			}
			assert.Equal(t, map[string]int{"create": 1}, writes, "one write: the slice as it should be")
		})
	}
}
