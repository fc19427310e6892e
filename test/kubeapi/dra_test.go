package kubeapi

// What nri-cni's identity may do as the DRA driver nri-cni.io, against the
// real API server: the RBAC rules and the two admission policies of
// dra-policy.yaml (ResourceSlices of its own node and driver; status.devices
// entries of nri-cni.io of claims allocated to its node). From Kubernetes
// 1.36 the API server itself authorizes status.devices per driver and node
// (resourceclaims/driver, associated-node verbs) and allocation/reservedFor
// (resourceclaims/binding) before admission, so some denials come from it
// rather than from the policy: the checks accept either there and log
// which; before 1.36 only the policy stands in the way.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	nadclient "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/kube"
	"github.com/nri-cni/nri-cni/kube/dra"
	"github.com/nri-cni/nri-cni/state"
	"github.com/nri-cni/nri-cni/test/cluster"
	"github.com/nri-cni/nri-cni/test/harness"
)

// otherDriver is a DRA driver that is not nri-cni's.
const otherDriver = "other.example.com"

// checkDRA runs the DRA checks with f's node-bound token (and one without
// the node claim).
func checkDRA(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity, f *fixture) {
	waitTypeChecked(ctx, t, c, id.SlicePolicy)
	waitTypeChecked(ctx, t, c, id.ClaimPolicy)
	sv, err := c.Client.Discovery().ServerVersion()
	require.NoError(t, err)
	v, err := version.ParseGeneric(sv.GitVersion)
	require.NoError(t, err)
	granular := v.AtLeast(version.MustParseGeneric("1.36"))
	t.Logf("API server %s: granular claim status authorization (1.36+) %v", sv.GitVersion, granular)
	unbound := unboundClient(ctx, t, c, id)
	t.Run("ResourceSlices", func(t *testing.T) { checkSlices(ctx, t, c, id, f, unbound) })
	t.Run("ClaimStatus", func(t *testing.T) { checkClaimStatus(ctx, t, c, id, f, unbound, granular) })
}

// unboundClient is nri-cni's ServiceAccount with a token bound to no pod
// (no node claim).
func unboundClient(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity) kubernetes.Interface {
	token, err := TokenFor(ctx, c.Client, id.Namespace, id.ServiceAccount, nil)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(AsToken(c.RESTConfig, token))
	require.NoError(t, err)
	return cs
}

// denied asserts err is policy's denial with want in its message.
func denied(t *testing.T, id identity, policy string, err error, want string) {
	t.Helper()
	require.Error(t, err, "want: %s", want)
	assert.True(t, apierrors.IsForbidden(err), "403: %v", err)
	assert.Contains(t, err.Error(), id.denialBy(policy))
	assert.Contains(t, err.Error(), want)
}

// newSlice is a one-device ResourceSlice of driver for node in pool.
func newSlice(name, driver, node, pool string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool:    resourcev1.ResourcePool{Name: pool, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "dev-0"}}}}
}

// checkSlices: nri-cni creates, updates and deletes its own node's slices
// of nri-cni.io — through the kubelet plugin helper's ResourceSlice
// controller, as the driver does, and directly — and dry-run creates the
// driver's probe; another node's, another driver's or another pool's are
// refused, and so is every write with a token without node claim.
func checkSlices(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity, f *fixture, unbound kubernetes.Interface) {
	admin := c.Client.ResourceV1().ResourceSlices()
	as := f.as.ResourceV1().ResourceSlices()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var made []string
	t.Cleanup(func() {
		for _, n := range made {
			if err := admin.Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				assert.NoError(t, err, "cleanup: ResourceSlice %s", n)
			}
		}
	})

	// The policy takes effect once the admission plugin has seen it (dry
	// runs: nothing is stored before it does).
	other := newSlice(harness.RandomName("kubeapi-other-node-"), dra.DriverName, f.otherNode, f.otherNode)
	var err error
	applied := time.Now()
	require.Eventually(t, func() bool {
		_, err = as.Create(ctx, other, dryRun)
		return err != nil
	}, waitFor, 200*time.Millisecond, "the ResourceSlice policy never denied a slice of another node")
	t.Logf("ResourceSlice policy in effect %s after its type check; another node's slice: %v", time.Since(applied).Round(time.Millisecond), err)
	denied(t, id, id.SlicePolicy, err, "may write only ResourceSlices of that node, not one of node "+f.otherNode)

	// The driver's start-up probe (kube/dra.Driver.probeMultiple).
	probe, err := as.Create(ctx, dra.ProbeSlice(c.NodeName), dryRun)
	require.NoError(t, err, "the driver's dry-run probe")
	t.Logf("probe: allowMultipleAllocations kept: %v", probe.Spec.Devices[0].AllowMultipleAllocations != nil)

	checkSliceController(ctx, t, c, f)

	// Directly: its own slice.
	own, err := as.Create(ctx, newSlice(harness.RandomName("kubeapi-own-"), dra.DriverName, c.NodeName, c.NodeName), metav1.CreateOptions{})
	require.NoError(t, err, "create a slice of its own node")
	made = append(made, own.Name)
	own.Spec.Devices = append(own.Spec.Devices, resourcev1.Device{Name: "dev-1"})
	own, err = as.Update(ctx, own, metav1.UpdateOptions{})
	require.NoError(t, err, "update a slice of its own node")
	require.NoError(t, as.Delete(ctx, own.Name, metav1.DeleteOptions{}), "delete a slice of its own node")

	// Created as another node's, another driver's, another pool's, or for
	// every node.
	for _, tc := range []struct {
		name  string
		slice *resourcev1.ResourceSlice
		want  string
	}{
		{"another node's", newSlice("", dra.DriverName, f.otherNode, f.otherNode), "not one of node " + f.otherNode},
		{"another driver's", newSlice("", otherDriver, c.NodeName, c.NodeName), "not of driver " + otherDriver},
		{"another pool's", newSlice("", dra.DriverName, c.NodeName, f.otherNode), "not of pool " + f.otherNode},
		{"every node's", func() *resourcev1.ResourceSlice {
			s := newSlice("", dra.DriverName, "", c.NodeName)
			s.Spec.NodeName, s.Spec.AllNodes = nil, ptr.To(true)
			return s
		}(), "not one without spec.nodeName"},
	} {
		tc.slice.GenerateName = "kubeapi-"
		_, err := as.Create(ctx, tc.slice, metav1.CreateOptions{})
		t.Logf("create %s slice: %v", tc.name, err)
		denied(t, id, id.SlicePolicy, err, tc.want)
	}

	// Slices the admin made (the policy does not apply to it): another
	// node's and another driver's are neither nri-cni's to update nor to
	// delete.
	for _, tc := range []struct {
		name  string
		slice *resourcev1.ResourceSlice
		want  string
	}{
		{"another node's", newSlice(harness.RandomName("kubeapi-other-node-"), dra.DriverName, f.otherNode, f.otherNode),
			"not one of node " + f.otherNode},
		{"another driver's", newSlice(harness.RandomName("kubeapi-other-driver-"), otherDriver, c.NodeName, c.NodeName),
			"not of driver " + otherDriver},
	} {
		s, err := admin.Create(ctx, tc.slice, metav1.CreateOptions{})
		require.NoError(t, err, "the admin creates %s slice", tc.name)
		made = append(made, s.Name)
		upd := s.DeepCopy()
		upd.Spec.Devices = append(upd.Spec.Devices, resourcev1.Device{Name: "dev-1"})
		_, err = as.Update(ctx, upd, metav1.UpdateOptions{})
		t.Logf("update %s slice: %v", tc.name, err)
		denied(t, id, id.SlicePolicy, err, tc.want)
		err = as.Delete(ctx, s.Name, metav1.DeleteOptions{})
		t.Logf("delete %s slice: %v", tc.name, err)
		denied(t, id, id.SlicePolicy, err, tc.want)
		still, err := admin.Get(ctx, s.Name, metav1.GetOptions{})
		require.NoError(t, err, "%s slice still there", tc.name)
		assert.Len(t, still.Spec.Devices, 1, "%s slice unchanged", tc.name)
	}

	// A token without the node claim writes no slice, not even its node's.
	_, err = unbound.ResourceV1().ResourceSlices().Create(ctx, dra.ProbeSlice(c.NodeName), dryRun)
	t.Logf("token without node claim: %v", err)
	denied(t, id, id.SlicePolicy, err, "only with a node-bound ServiceAccount token")
}

// checkSliceController runs the kubelet plugin helper's ResourceSlice
// controller (what kube/dra publishes through) as nri-cni, for this node's
// pool, through a create, an update, a second slice and the deletes of
// obsolete slices: every call passes the policy.
func checkSliceController(ctx context.Context, t *testing.T, c *cluster.Cluster, f *fixture) {
	var mu sync.Mutex
	var errs []error
	devices := func(names ...string) []resourcev1.Device {
		var d []resourcev1.Device
		for _, n := range names {
			d = append(d, resourcev1.Device{Name: n})
		}
		return d
	}
	pool := func(slices ...[]resourcev1.Device) *resourceslice.DriverResources {
		p := resourceslice.Pool{}
		for _, d := range slices {
			p.Slices = append(p.Slices, resourceslice.Slice{Devices: d})
		}
		return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{c.NodeName: p}}
	}
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: dra.DriverName, KubeClient: f.as,
		Owner:     &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: c.NodeName},
		Resources: pool(devices("net-a")),
		// Faster than the helper's defaults; the same calls.
		SyncDelay: ptr.To(200 * time.Millisecond), MutationCacheTTL: ptr.To(time.Second),
		ErrorHandler: func(_ context.Context, err error, msg string) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, fmt.Errorf("%s: %w", msg, err))
		},
	})
	require.NoError(t, err)
	defer ctrl.Stop()

	// published waits until the node's slices of nri-cni.io hold want (one
	// device list per slice, in any order).
	published := func(step string, want ...[]string) {
		t.Helper()
		var got []string
		require.Eventually(t, func() bool {
			l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
				FieldSelector: resourcev1.ResourceSliceSelectorDriver + "=" + dra.DriverName + "," +
					resourcev1.ResourceSliceSelectorNodeName + "=" + c.NodeName})
			if err != nil {
				return false
			}
			got = got[:0]
			for _, s := range l.Items {
				var names []string
				for _, d := range s.Spec.Devices {
					names = append(names, d.Name)
				}
				got = append(got, strings.Join(names, ","))
			}
			var w []string
			for _, ws := range want {
				w = append(w, strings.Join(ws, ","))
			}
			sort.Strings(got)
			sort.Strings(w)
			return slices.Equal(w, got)
		}, waitFor, 100*time.Millisecond, "%s: slices %v, want %v", step, got, want)
		t.Logf("%s: slices %v", step, got)
	}
	published("create", []string{"net-a"})
	ctrl.Update(pool(devices("net-a", "net-b")))
	published("update", []string{"net-a", "net-b"})
	ctrl.Update(pool(devices("net-a"), devices("net-c")))
	published("a second slice", []string{"net-a"}, []string{"net-c"})
	ctrl.Update(pool(devices("net-a")))
	published("an obsolete slice deleted", []string{"net-a"})
	ctrl.Update(&resourceslice.DriverResources{})
	published("the pool removed")

	st := ctrl.GetStats()
	t.Logf("ResourceSlice controller as nri-cni: %d creates, %d updates, %d deletes", st.NumCreates, st.NumUpdates, st.NumDeletes)
	assert.GreaterOrEqual(t, st.NumCreates, int64(2))
	assert.GreaterOrEqual(t, st.NumUpdates, int64(1))
	assert.GreaterOrEqual(t, st.NumDeletes, int64(2))
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Logf("ResourceSlice controller: %v", err)
		assert.False(t, apierrors.IsForbidden(err), "the policy refused the helper's call: %v", err)
	}
}

// claimFixture: claims the admin made and allocated (status.allocation
// through the status subresource, as the scheduler does).
type claimFixture struct {
	here     *resourcev1.ResourceClaim // a device of nri-cni.io (pool = this node) and one of otherDriver, on this node
	there    *resourcev1.ResourceClaim // a device of nri-cni.io on another node
	mismatch *resourcev1.ResourceClaim // on this node, but its nri-cni.io device of a pool named after another node
	plain    *resourcev1.ResourceClaim // a device of nri-cni.io on this node, no status.devices
}

// nodeSelector is the allocation's node selector for devices of a node's
// ResourceSlice (what the scheduler writes).
func nodeSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
}

// allocatedClaim creates a claim with one request per result and writes
// its allocation (and, if given, status.devices) as the admin.
func allocatedClaim(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns, name, node string,
	results []resourcev1.DeviceRequestAllocationResult, devices []resourcev1.AllocatedDeviceStatus) *resourcev1.ResourceClaim {
	t.Helper()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for _, r := range results {
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourcev1.DeviceRequest{Name: r.Request,
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.DriverName}})
	}
	claims := admin.ResourceV1().ResourceClaims(ns)
	claim, err := claims.Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err, "ResourceClaim %s/%s", ns, name)
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results},
		NodeSelector: nodeSelector(node)}
	claim.Status.Devices = devices
	claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	require.NoError(t, err, "ResourceClaim %s/%s: allocation", ns, name)
	return claim
}

func newClaimFixture(ctx context.Context, t *testing.T, c *cluster.Cluster, f *fixture) *claimFixture {
	node, other := c.NodeName, f.otherNode
	net := func(pool string) resourcev1.DeviceRequestAllocationResult {
		return resourcev1.DeviceRequestAllocationResult{Request: "net", Driver: dra.DriverName, Pool: pool, Device: "net-0"}
	}
	return &claimFixture{
		here: allocatedClaim(ctx, t, c.Client, f.ns, "here", node,
			[]resourcev1.DeviceRequestAllocationResult{net(node),
				{Request: "other", Driver: otherDriver, Pool: node, Device: "dev-0"}},
			[]resourcev1.AllocatedDeviceStatus{{Driver: otherDriver, Pool: node, Device: "dev-0",
				NetworkData: &resourcev1.NetworkDeviceData{InterfaceName: "other0"}}}),
		there:    allocatedClaim(ctx, t, c.Client, f.ns, "there", other, []resourcev1.DeviceRequestAllocationResult{net(other)}, nil),
		mismatch: allocatedClaim(ctx, t, c.Client, f.ns, "mismatch", node, []resourcev1.DeviceRequestAllocationResult{net(other)}, nil),
		plain:    allocatedClaim(ctx, t, c.Client, f.ns, "plain", node, []resourcev1.DeviceRequestAllocationResult{net(node)}, nil),
	}
}

// entry is a status.devices entry of nri-cni.io for a device of pool.
func entry(pool, ifName string) resourcev1.AllocatedDeviceStatus {
	return resourcev1.AllocatedDeviceStatus{Driver: dra.DriverName, Pool: pool, Device: "net-0",
		NetworkData: &resourcev1.NetworkDeviceData{InterfaceName: ifName, IPs: []string{"10.250.0.9/16"}}}
}

// jsonPatch is a JSON patch of claim's status guarded by its
// resourceVersion, as kube/claimstatus.go sends: ops after the guard.
func jsonPatch(t *testing.T, claim *resourcev1.ResourceClaim, ops ...map[string]any) []byte {
	t.Helper()
	data, err := json.Marshal(append([]map[string]any{
		{"op": "replace", "path": "/metadata/resourceVersion", "value": claim.ResourceVersion}}, ops...))
	require.NoError(t, err)
	return data
}

func setDevices(devices ...resourcev1.AllocatedDeviceStatus) map[string]any {
	return map[string]any{"op": "add", "path": "/status/devices", "value": devices}
}

func patchStatus(ctx context.Context, cs kubernetes.Interface, claim *resourcev1.ResourceClaim, patch []byte, dryRun bool) error {
	o := metav1.PatchOptions{FieldManager: "nri-cni"}
	if dryRun {
		o.DryRun = []string{metav1.DryRunAll}
	}
	_, err := cs.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, types.JSONPatchType, patch, o, "status")
	return err
}

// checkClaimStatus: nri-cni writes its entries of a claim allocated to its
// node (kube.StatusWriter, the daemon's own code); it may not write those
// of a claim on another node, another driver's entries, the allocation or
// the reservations, nor anything with a token without node claim.
func checkClaimStatus(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity, f *fixture,
	unbound kubernetes.Interface, granular bool) {
	cf := newClaimFixture(ctx, t, c, f)
	claims := c.Client.ResourceV1().ResourceClaims(f.ns)

	// The policy alone refuses this one at every version (the API server
	// lets the token's node write claims allocated to it): in effect once
	// the admission plugin has seen it.
	var err error
	applied := time.Now()
	require.Eventually(t, func() bool {
		err = patchStatus(ctx, f.as, cf.mismatch, jsonPatch(t, cf.mismatch, setDevices(entry(f.otherNode, "net1"))), true)
		return err != nil
	}, waitFor, 200*time.Millisecond, "the claim status policy never denied an entry of another node's pool")
	t.Logf("claim status policy in effect %s after its type check; a device of pool %s: %v",
		time.Since(applied).Round(time.Millisecond), f.otherNode, err)
	denied(t, id, id.ClaimPolicy, err, "whose nri-cni.io devices are of pool "+c.NodeName+" only, not of pool "+f.otherNode)

	// Its own entry of a claim allocated here, by the daemon's status
	// writer: the other driver's entry is kept.
	writeWithStatusWriter(ctx, t, c, f, cf.here)
	here, err := claims.Get(ctx, cf.here.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, here.Status.Devices, 2, "the other driver's entry and nri-cni's")
	assert.Equal(t, cf.here.Status.Devices[0], here.Status.Devices[0], "the other driver's entry kept")
	assert.Equal(t, dra.DriverName, here.Status.Devices[1].Driver)
	assert.Equal(t, "net1", here.Status.Devices[1].NetworkData.InterfaceName)
	// And directly, as kube/claimstatus.go patches.
	require.NoError(t, patchStatus(ctx, f.as, here, jsonPatch(t, here,
		setDevices(here.Status.Devices[0], entry(c.NodeName, "net2"))), false), "a JSON patch of its own entry")
	here, err = claims.Get(ctx, cf.here.Name, metav1.GetOptions{})
	require.NoError(t, err)

	// claimDenied: err refuses a status write. Before 1.36 it must be the
	// policy's (want): resourceclaims/status lets a driver write any
	// claim. From 1.36 it must be the API server's own authorization of
	// resourceclaims/<sub>, which runs before admission: the shipped RBAC
	// (associated-node verbs, resourceNames nri-cni.io) alone refuses
	// each case, so an RBAC that granted arbitrary-node verbs or another
	// driver's name fails here even though the policy would still deny.
	claimDenied := func(what string, err error, sub, want string) {
		t.Helper()
		require.Error(t, err, what)
		switch {
		case granular:
			t.Logf("%s: %v", what, err)
			assert.True(t, apierrors.IsInvalid(err), "%s: want the API server's authorization of resourceclaims/%s, got %v", what, sub, err)
			assert.Contains(t, err.Error(), `requires resource="resourceclaims/`+sub+`"`, what)
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), id.denialBy(id.ClaimPolicy)):
			t.Logf("%s: denied by the admission policy: %v", what, err)
			assert.Contains(t, err.Error(), want, what)
		default:
			assert.Fail(t, "not denied by the admission policy", "%s: %v", what, err)
		}
	}
	other, mine := here.Status.Devices[0], here.Status.Devices[1]
	changed := *other.DeepCopy()
	changed.NetworkData.InterfaceName = "evil0"
	cases := []struct {
		what, sub, want string
		cs              kubernetes.Interface
		claim           *resourcev1.ResourceClaim
		ops             []map[string]any
	}{
		{"its entry of a claim on another node", "driver", "may write the status of claims allocated to that node only, not of one allocated to node " + f.otherNode,
			f.as, cf.there, []map[string]any{setDevices(entry(f.otherNode, "net1"))}},
		{"another driver's entry changed", "driver", "not another driver's",
			f.as, here, []map[string]any{setDevices(changed, mine)}},
		{"another driver's entry removed", "driver", "not another driver's",
			f.as, here, []map[string]any{setDevices(mine)}},
		// (Of a claim without other drivers' entries: the API server drops
		// the entries of a deallocated claim, and the policy would name
		// the first thing refused.)
		{"the allocation removed", "binding", "may not change a ResourceClaim's status.allocation or status.reservedFor",
			f.as, cf.plain, []map[string]any{{"op": "remove", "path": "/status/allocation"}}},
		{"a reservation added", "binding", "may not change a ResourceClaim's status.allocation or status.reservedFor",
			f.as, cf.plain, []map[string]any{{"op": "add", "path": "/status/reservedFor", "value": []resourcev1.ResourceClaimConsumerReference{
				{Resource: "pods", Name: f.here.Name, UID: f.here.UID}}}}},
		{"a token without node claim", "driver", "only with a node-bound ServiceAccount token",
			unbound, here, []map[string]any{setDevices(other, entry(c.NodeName, "net3"))}},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.what, " ", "_"), func(t *testing.T) {
			err := patchStatus(ctx, tc.cs, tc.claim, jsonPatch(t, tc.claim, tc.ops...), false)
			claimDenied(tc.what, err, tc.sub, tc.want)
		})
	}

	// The policy alone, at every version: with RBAC widened to what
	// resourceclaims/status alone allows before 1.36 (any driver's entries
	// of any claim, allocation and reservations), the API server lets
	// every case through to admission, and the policy refuses each.
	widenClaimRBAC(ctx, t, c, id)
	require.Eventually(t, func() bool {
		err = patchStatus(ctx, f.as, cases[0].claim, jsonPatch(t, cases[0].claim, cases[0].ops...), true)
		return apierrors.IsForbidden(err)
	}, waitFor, 200*time.Millisecond, "the widened RBAC never took effect: %v", err)
	for _, tc := range cases {
		t.Run("PolicyAlone/"+strings.ReplaceAll(tc.what, " ", "_"), func(t *testing.T) {
			err := patchStatus(ctx, tc.cs, tc.claim, jsonPatch(t, tc.claim, tc.ops...), false)
			t.Logf("%s: %v", tc.what, err)
			denied(t, id, id.ClaimPolicy, err, tc.want)
		})
	}

	after, err := claims.Get(ctx, cf.here.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, here.Status, after.Status, "nothing denied got through")
	there, err := claims.Get(ctx, cf.there.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, there.Status.Devices, "nothing written to the other node's claim")
	plain, err := claims.Get(ctx, cf.plain.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, cf.plain.Status, plain.Status, "allocation and reservations unchanged")

	// Everyone else is unaffected: the admin changes the other driver's entry.
	require.NoError(t, patchStatus(ctx, c.Client, after, jsonPatch(t, after, setDevices(changed, mine)), false),
		"the policy matches nri-cni's ServiceAccount only")
}

// widenClaimRBAC grants id, until the test ends, every driver's
// status.devices of claims on any node and the allocation and reservations
// (resourceclaims/driver, resourceclaims/binding): what 1.34's
// resourceclaims/status alone allows.
func widenClaimRBAC(ctx context.Context, t *testing.T, c *cluster.Cluster, id identity) {
	name := harness.RandomName("kubeapi-dra-wide-")
	rbac := c.Client.RbacV1()
	_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{resourcev1.GroupName}, Resources: []string{"resourceclaims/" + resourcev1.SubresourceDriver},
				Verbs: []string{resourcev1.VerbPrefixArbitraryNode + "patch", resourcev1.VerbPrefixArbitraryNode + "update",
					resourcev1.VerbPrefixAssociatedNode + "patch", resourcev1.VerbPrefixAssociatedNode + "update"}},
			{APIGroups: []string{resourcev1.GroupName}, Resources: []string{"resourceclaims/" + resourcev1.SubresourceBinding},
				Verbs: []string{"patch", "update"}},
		}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
	_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: id.ServiceAccount, Namespace: id.Namespace}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
}

// writeWithStatusWriter has kube.StatusWriter (nri-cni's own status code,
// as nri-cni) report an attachment of claim's nri-cni.io device on f.here,
// and waits for the claim's entry.
func writeWithStatusWriter(ctx context.Context, t *testing.T, c *cluster.Cluster, f *fixture, claim *resourcev1.ResourceClaim) {
	log := logrus.New()
	var buf syncBuffer
	log.SetOutput(&buf)
	log.SetLevel(logrus.DebugLevel)
	defer func() { t.Logf("kube/ log:\n%s", buf.String()) }()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	nadAs, err := nadclient.NewForConfig(f.asCfg)
	require.NoError(t, err)
	m := kube.Start(runCtx, &kube.Clients{Core: f.as, NAD: nadAs, NodeName: c.NodeName}, logrus.NewEntry(log),
		kube.Options{Status: kube.StatusOptions{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}})
	ref := &state.ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID), Request: "net",
		Driver: dra.DriverName, Pool: c.NodeName, Device: "net-0"}
	m.Status.PodNetworks(attach.PodNetworks{Namespace: f.ns, Name: f.here.Name, UID: string(f.here.UID),
		Networks: []attach.NetworkStatus{
			{Name: "default", Interface: "eth0", IPs: []string{"10.0.0.9"}, Default: true},
			{Name: "secondary", Interface: "net1", IPs: []string{"10.250.0.9"}, IPNets: []string{"10.250.0.9/16"}, Claim: ref},
		}})
	require.Eventually(t, func() bool {
		got, err := c.Client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, d := range got.Status.Devices {
			if d.Driver == dra.DriverName && d.Pool == c.NodeName && d.NetworkData != nil && d.NetworkData.InterfaceName == "net1" {
				return true
			}
		}
		return false
	}, waitFor, 100*time.Millisecond, "kube.StatusWriter's claim status never landed")
}
