package kube

// The status of DRA claims (driver nri-cni.io): for each attached claim
// device, a status.devices entry (driver, pool, device, share) with a Ready
// condition, networkData (interface, addresses in CIDR form, MAC) and data
// (the CNI result). Written with server-side apply of the status
// subresource under nri-cni's field manager, so only nri-cni's entries
// change: the API server authorizes it as the resourceclaims/driver
// subresource for driver nri-cni.io (1.36+; associated-node verbs for a
// service account bound to the claim's node) or as resourceclaims/status
// (1.34, 1.35).

import (
	"context"
	"fmt"
	"sort"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"

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
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		if err != nil {
			log.WithError(err).Debug("claim status not written: the claim is gone or replaced")
		}
		done()
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

// writeClaim applies cs's entries to the claim's status, guarded by its UID.
func (w *StatusWriter) writeClaim(ctx context.Context, cs *claimStatus) error {
	ac, err := claimApply(cs, metav1.Now())
	if err != nil {
		return err
	}
	_, err = w.client.ResourceV1().ResourceClaims(cs.Namespace).ApplyStatus(ctx, ac,
		metav1.ApplyOptions{FieldManager: claimFieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying status of ResourceClaim %s/%s: %w", cs.Namespace, cs.Name, err)
	}
	return nil
}

// claimApply is the apply configuration of cs: the claim's identity (the
// UID makes the API server refuse a claim of that name that is another
// one) and nri-cni's status.devices entries.
func claimApply(cs *claimStatus, now metav1.Time) (*resourceapply.ResourceClaimApplyConfiguration, error) {
	// No entries (a released claim): server-side apply removes those this
	// field manager applied before, and only those.
	status := resourceapply.ResourceClaimStatus()
	for _, d := range cs.Devices {
		c := d.Claim
		e := resourceapply.AllocatedDeviceStatus().WithDriver(c.Driver).WithPool(c.Pool).WithDevice(c.Device).
			WithConditions(metav1apply.Condition().WithType(ConditionReady).WithStatus(metav1.ConditionTrue).
				WithReason(ReasonAttached).WithMessage(fmt.Sprintf("%s: %s", claimStatusMessage, d.Interface)).
				WithLastTransitionTime(now))
		if c.ShareID != "" {
			e.WithShareID(c.ShareID)
		}
		nd := resourceapply.NetworkDeviceData().WithInterfaceName(d.Interface)
		ips := d.IPNets
		if len(ips) > maxNetworkIPs {
			ips = ips[:maxNetworkIPs]
		}
		if len(ips) > 0 {
			nd.WithIPs(ips...)
		}
		if d.Mac != "" {
			nd.WithHardwareAddress(d.Mac)
		}
		e.WithNetworkData(nd)
		if len(d.Result) > 0 && len(d.Result) <= maxDeviceDataBytes {
			e.WithData(runtime.RawExtension{Raw: d.Result})
		}
		status.Devices = append(status.Devices, *e)
	}
	ac := resourceapply.ResourceClaim(cs.Name, cs.Namespace).WithStatus(status)
	ac.WithUID(types.UID(cs.UID))
	return ac, nil
}
