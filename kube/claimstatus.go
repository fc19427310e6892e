package kube

// The status of DRA claims (driver nri-cni.io): for each attached claim
// device, a status.devices entry (driver, pool, device, share) with a Ready
// condition, networkData (interface, addresses in CIDR form, MAC) and data
// (the CNI result). Written by a JSON patch of the status subresource
// (writeClaim says why not server-side apply) that changes only nri-cni's
// entries: the API server authorizes it as the resourceclaims/driver
// subresource for driver nri-cni.io (1.36+; associated-node verbs for a
// service account bound to the claim's node) or as resourceclaims/status
// (1.34, 1.35).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/sirupsen/logrus"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nri-cni/nri-cni/attach"
)

// Limits of status.devices[] (resource.k8s.io/v1 validation).
const (
	maxDeviceDataBytes = 10 << 10 // data
	maxNetworkIPs      = 16       // networkData.ips
)

// Condition of a claim device.
const (
	ConditionReady     = "Ready"
	ReasonAttached     = "NetworkAttached"
	claimFieldManager  = "nri-cni"
	claimDriver        = "nri-cni.io" // kube/dra.DriverName
	claimStatusMessage = "attached by nri-cni"
)

// claimStatus is what nri-cni writes to one claim: an entry per attached
// device (none: remove nri-cni's entries).
type claimStatus struct {
	Namespace, Name, UID string
	Devices              []attach.NetworkStatus
}

// claimStatuses groups pn's claim networks by claim.
func claimStatuses(pn attach.PodNetworks) []*claimStatus {
	by := map[string]*claimStatus{}
	for _, n := range pn.Networks {
		if n.Claim == nil {
			continue
		}
		cs, ok := by[n.Claim.UID]
		if !ok {
			cs = &claimStatus{Namespace: n.Claim.Namespace, Name: n.Claim.Name, UID: n.Claim.UID}
			by[n.Claim.UID] = cs
		}
		cs.Devices = append(cs.Devices, n)
	}
	out := make([]*claimStatus, 0, len(by))
	for _, cs := range by {
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ClaimReleased queues the removal of nri-cni's status.devices entries
// from a claim the kubelet unprepared (if the claim still exists).
func (w *StatusWriter) ClaimReleased(namespace, name, uid string) {
	w.enqueue(claimKey(uid), pendingStatus{claim: &claimStatus{Namespace: namespace, Name: name, UID: uid}})
}

// nextClaim writes one claim's status; done forgets it once written (or
// the claim is gone or replaced).
func (w *StatusWriter) nextClaim(ctx context.Context, key string, cs *claimStatus, done func()) {
	log := w.log.WithFields(logrus.Fields{"claim": cs.Name, "namespace": cs.Namespace, "uid": cs.UID})
	err := w.writeClaim(ctx, cs)
	switch {
	case err == nil, apierrors.IsNotFound(err), errors.Is(err, errClaimReplaced):
		if err != nil {
			log.WithError(err).Debug("claim status not written: the claim is gone or replaced")
		}
		done()
	case apierrors.IsConflict(err):
		// Changed since it was read (the kubelet, another driver): again,
		// from a fresh read.
		w.queue.AddRateLimited(key)
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		// Retrying cannot help: RBAC (or the node binding of the service
		// account) refuses, or the entry is invalid. Said once, loudly.
		log.WithError(err).Error("writing the claim's status.devices refused; not retrying")
		done()
	default:
		log.WithError(err).WithField("retries", w.queue.NumRequeues(key)).Warn("writing the claim's status failed; retrying with backoff")
		w.queue.AddRateLimited(key)
	}
}

// errClaimReplaced: the claim of that name is another one (another UID).
var errClaimReplaced = errors.New("the claim of that name is another one")

// writeClaim sets nri-cni's entries of the claim's status.devices to cs's,
// keeping every other driver's: a JSON patch of the status subresource
// made against the claim as read, guarded by its resourceVersion (a claim
// changed meanwhile is a Conflict: read again and retry). Not server-side
// apply: its round trip re-encodes the claim's allocation, and the API
// server refuses an opaque config whose keys were not in sorted order as
// a change of the immutable status.allocation (seen on 1.34.4). An
// unchanged status costs the read only.
func (w *StatusWriter) writeClaim(ctx context.Context, cs *claimStatus) error {
	claims := w.client.ResourceV1().ResourceClaims(cs.Namespace)
	c, err := claims.Get(ctx, cs.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading ResourceClaim %s/%s: %w", cs.Namespace, cs.Name, err)
	}
	if string(c.UID) != cs.UID {
		return fmt.Errorf("ResourceClaim %s/%s: %w (uid %s, want %s)", cs.Namespace, cs.Name, errClaimReplaced, c.UID, cs.UID)
	}
	patch, err := claimPatch(c, cs, metav1.Now())
	if err != nil || patch == nil {
		return err
	}
	if _, err := claims.Patch(ctx, cs.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: claimFieldManager}, "status"); err != nil {
		return fmt.Errorf("patching status of ResourceClaim %s/%s: %w", cs.Namespace, cs.Name, err)
	}
	return nil
}

// claimPatch is the JSON patch that makes c's status.devices hold cs's
// entries in place of driver nri-cni.io's (nil: nothing to change). An
// entry that did not change keeps its condition's transition time.
func claimPatch(c *resourcev1.ResourceClaim, cs *claimStatus, now metav1.Time) ([]byte, error) {
	var devices []resourcev1.AllocatedDeviceStatus
	old := map[string]resourcev1.AllocatedDeviceStatus{}
	for _, d := range c.Status.Devices {
		if d.Driver == claimDriver {
			old[deviceKey(d)] = d
			continue
		}
		devices = append(devices, d)
	}
	same := len(old) == len(cs.Devices)
	for _, n := range cs.Devices {
		e := deviceEntry(n, now)
		prev, ok := old[deviceKey(e)]
		if ok && len(prev.Conditions) == 1 {
			e.Conditions[0].LastTransitionTime = prev.Conditions[0].LastTransitionTime
		}
		same = same && ok && apiequality.Semantic.DeepEqual(prev, e)
		devices = append(devices, e)
	}
	if same {
		return nil, nil
	}
	ops := []map[string]any{{"op": "replace", "path": "/metadata/resourceVersion", "value": c.ResourceVersion}}
	switch {
	case len(devices) > 0:
		ops = append(ops, map[string]any{"op": "add", "path": "/status/devices", "value": devices})
	case len(c.Status.Devices) > 0:
		ops = append(ops, map[string]any{"op": "remove", "path": "/status/devices"})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("ResourceClaim %s/%s: %w", cs.Namespace, cs.Name, err)
	}
	return data, nil
}

func deviceKey(d resourcev1.AllocatedDeviceStatus) string {
	return d.Pool + "/" + d.Device + "/" + ptr.Deref(d.ShareID, "")
}

// deviceEntry is the status.devices entry of one attached claim device.
func deviceEntry(d attach.NetworkStatus, now metav1.Time) resourcev1.AllocatedDeviceStatus {
	c := d.Claim
	e := resourcev1.AllocatedDeviceStatus{Driver: c.Driver, Pool: c.Pool, Device: c.Device,
		Conditions: []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonAttached,
			Message: fmt.Sprintf("%s: %s", claimStatusMessage, d.Interface), LastTransitionTime: now}},
		NetworkData: &resourcev1.NetworkDeviceData{InterfaceName: d.Interface, HardwareAddress: d.Mac}}
	if c.ShareID != "" {
		e.ShareID = ptr.To(c.ShareID)
	}
	ips := d.IPNets
	if len(ips) > maxNetworkIPs {
		ips = ips[:maxNetworkIPs]
	}
	e.NetworkData.IPs = slices.Clone(ips)
	if len(d.Result) > 0 && len(d.Result) <= maxDeviceDataBytes {
		e.Data = &runtime.RawExtension{Raw: d.Result}
	}
	return e
}
