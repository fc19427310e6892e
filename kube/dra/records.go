package dra

// Prepared-claim records against the kubelet's checkpoint (checkpoint.go).
// The kubelet prepares a claim once and checkpoints it; it does not ask
// again for the pod's next sandbox. If nri-cni's record of the claim is
// gone or unreadable (a power loss, a wiped state dir), planning would find
// no claim for the pod and its sandbox would start without the network. So:
//
//   - at start, before nri-cni serves the runtime (CheckRecordsAtStart),
//     and every 30 s after (KeepRecords), the claims the checkpoint holds as
//     prepared by nri-cni.io are compared with the records; one without a
//     readable record is kept as missing (state.Claims.Reconcile) and the
//     pod's attach fails with the reason (plan.ErrClaimRecordMissing):
//     RunPodSandbox or the container's start fails closed, with a Warning
//     Event on the pod (NetworkAttachFailed) naming the claim;
//   - the record is rebuilt when enough is known: the checkpoint names the
//     claim, its pods and devices but not its NetworkConfig, so nri-cni
//     reads the claim (one GET, off the runtime's path) and prepares it
//     again with every check of a prepare (allocated here, the pod's own,
//     its class allowed, the device still published, the config valid). If
//     that fails, the claim gets a Warning Event (ClaimRecordMissing) saying
//     why, and the pod stays held back until it is deleted;
//   - records of claims the checkpoint does not hold are reported, not
//     removed: a claim being prepared has a record before the kubelet's
//     checkpoint lists its devices.

import (
	"context"
	"errors"
	"fmt"
	"github.com/nri-cni/nri-cni/loop"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/state"
)

// RecordWarner is told about a claim the kubelet holds as prepared by
// nri-cni.io whose record is missing and could not be rebuilt: a Warning
// Event on the claim. The driver's Sink implements it (kube.StatusWriter).
type RecordWarner interface {
	ClaimRecordMissing(namespace, name, uid, message string)
}

// Record keeping's pace and bounds.
const (
	recordsEvery       = 30 * time.Second
	rebuildTimeout     = 5 * time.Second
	maxRebuildsPerPass = 16
	staleAfter         = 10 * time.Minute
)

// CheckRecordsAtStart compares the claim records with the kubelet's
// checkpoint at path, with no API call: at start, before nri-cni serves the
// runtime, so no sandbox of a pod whose claim record is gone starts before
// the driver is up. It logs what it finds.
func CheckRecordsAtStart(claims *state.Claims, path string, log *logrus.Entry) {
	held, err := ReadKubeletClaims(path, DriverName)
	if err != nil {
		log.WithError(err).Warn("DRA: cannot read the kubelet's DRA checkpoint: a claim whose record is lost is not detected until it can")
		return
	}
	for _, m := range claims.Reconcile(held) {
		log.WithFields(logrus.Fields{"claim": m.Name, "namespace": m.Namespace, "uid": m.UID, "pods": m.Pods}).
			Error("DRA: the kubelet holds this claim as prepared by nri-cni.io, but " + m.Reason +
				": its pod's networks fail until the record is rebuilt from the claim")
	}
}

// KeepRecords compares the claim records with the kubelet's checkpoint at
// path now and every 30 s (every, if positive) until ctx ends, rebuilding
// missing records where it can.
func (d *Driver) KeepRecords(ctx context.Context, path string, every time.Duration) {
	if every <= 0 {
		every = recordsEvery
	}
	k := newRecordKeeper(d, path)
	loop.Every(ctx, every, nil, true, func() { k.pass(ctx) })
}

// recordKeeper is KeepRecords' memory: what it said already.
type recordKeeper struct {
	d       *Driver
	path    string
	readErr string            // the last checkpoint error logged
	warned  map[string]string // claim UID -> the warning given
	stale   map[string]bool   // claim UIDs reported stale
}

func newRecordKeeper(d *Driver, path string) *recordKeeper {
	return &recordKeeper{d: d, path: path, warned: map[string]string{}, stale: map[string]bool{}}
}

// pass is one comparison.
func (k *recordKeeper) pass(ctx context.Context) {
	log := k.d.o.Log
	held, err := ReadKubeletClaims(k.path, DriverName)
	if err != nil {
		if err.Error() != k.readErr {
			log.WithError(err).Warn("DRA: cannot read the kubelet's DRA checkpoint: a claim whose record is lost is not detected until it can")
			k.readErr = err.Error()
		}
		return
	}
	k.readErr = ""
	missing := k.d.o.Claims.Reconcile(held)
	for i, m := range missing {
		if ctx.Err() != nil {
			return
		}
		err := errRebuildSkipped
		if i < maxRebuildsPerPass {
			err = k.d.rebuild(ctx, m)
		}
		l := log.WithFields(logrus.Fields{"claim": m.Name, "namespace": m.Namespace, "uid": m.UID})
		if err == nil {
			l.Info("DRA: rebuilt the record of a prepared claim from the claim (" + m.Reason + ")")
			delete(k.warned, m.UID)
			continue
		}
		msg := fmt.Sprintf("nri-cni has no record of preparing this claim on node %s (%s) and could not rebuild it (%v): "+
			"its pod's containers do not start; delete the pod so that the claim is made and prepared again",
			k.d.o.NodeName, m.Reason, err)
		if k.warned[m.UID] == msg {
			continue
		}
		k.warned[m.UID] = msg
		l.WithError(err).Error("DRA: " + msg)
		if w, ok := k.d.o.Sink.(RecordWarner); ok {
			w.ClaimRecordMissing(m.Namespace, m.Name, m.UID, msg)
		}
	}
	for uid := range k.warned {
		if !slices.ContainsFunc(missing, func(m state.MissingClaim) bool { return m.UID == uid }) {
			delete(k.warned, uid)
		}
	}
	for _, pc := range k.d.o.Claims.Stale(held) {
		if k.stale[pc.UID] || time.Since(pc.Prepared) < staleAfter {
			continue
		}
		k.stale[pc.UID] = true
		log.WithFields(logrus.Fields{"claim": pc.Name, "namespace": pc.Namespace, "uid": pc.UID, "prepared": pc.Prepared}).
			Warn("DRA: a prepared-claim record of a claim the kubelet does not hold: kept (the kubelet unprepares only what it holds)")
	}
}

// errRebuildSkipped: more missing records than one pass rebuilds.
var errRebuildSkipped = fmt.Errorf("not tried in this pass (at most %d per pass)", maxRebuildsPerPass)

// rebuild reads the claim and prepares it again (every check of a
// prepare), which writes its record.
func (d *Driver) rebuild(ctx context.Context, m state.MissingClaim) error {
	if d.o.Client == nil {
		return errors.New("no API client")
	}
	ctx, cancel := context.WithTimeout(ctx, rebuildTimeout)
	defer cancel()
	c, err := d.o.Client.ResourceV1().ResourceClaims(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the claim: %w", err)
	}
	if string(c.UID) != m.UID {
		return fmt.Errorf("the claim of that name now is another (uid %s)", c.UID)
	}
	if c.DeletionTimestamp != nil {
		return errors.New("the claim is being deleted")
	}
	pod, err := ownPod(c)
	if err != nil {
		return err
	}
	if !slices.Contains(m.Pods, pod) {
		return fmt.Errorf("it is reserved for pod %s, which the kubelet does not hold it for", pod)
	}
	_, err = d.prepare(c)
	return err
}
