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
//     checkpoint lists its devices;
//   - while the checkpoint cannot be read (a newer kubelet's format, a bad
//     checksum, the file missing or closed to nri-cni), the records hold
//     back the pods whose claim may be lost (state/claimjudge.go's rules)
//     and the driver rebuilds what it can name; it is reported at each
//     change: the log, the gauge nri_cni_dra_checkpoint_unreadable{reason}
//     and a Warning Event on the Node once per reason (CheckpointReporter),
//     and the report `nri-cni status` prints (state.CheckpointReport).
//     Readiness does not change: the kubelet's format is not nri-cni's
//     health, and a readiness that followed it would stop a DaemonSet
//     rollout on every node whose kubelet is newer than nri-cni.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-cni/nri-cni/loop"
	"github.com/nri-cni/nri-cni/state"
)

// RecordWarner is told about a claim the kubelet holds as prepared by
// nri-cni.io whose record is missing and could not be rebuilt: a Warning
// Event on the claim. The driver's Sink implements it (kube.StatusWriter).
type RecordWarner interface {
	ClaimRecordMissing(namespace, name, uid, message string)
}

// CheckpointReporter is told what nri-cni learns of the kubelet's
// checkpoint at path, at each change: reason "" when it was read, else its
// class (CheckpointReasons) and the error, which names the file. The
// driver's Reporter implements it (kube: the gauge and a Warning Event on
// the Node).
type CheckpointReporter interface {
	KubeletCheckpoint(path, reason string, err error)
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
// the driver is up. If the checkpoint cannot be read, the records are told
// (state.Claims.CannotJudge) before the first pod. It logs what it finds
// and saves the report for `nri-cni status`.
func CheckRecordsAtStart(claims ClaimStore, path string, log *logrus.Entry) {
	held, err := ReadKubeletClaims(path, DriverName)
	defer func() {
		if serr := claims.SaveReport(checkpointReport(path, err, claims, time.Now())); serr != nil {
			log.WithError(serr).Warn("DRA: the report of the kubelet's DRA checkpoint is not saved for nri-cni status")
		}
	}()
	if err != nil {
		claims.CannotJudge(err.Error())
		logUnjudged(log, claims, err)
		return
	}
	for _, m := range claims.Reconcile(held) {
		log.WithFields(logrus.Fields{"claim": m.Name, "namespace": m.Namespace, "uid": m.UID, "pods": m.Pods}).
			Error("DRA: the kubelet holds this claim as prepared by nri-cni.io, but " + m.Reason +
				": its pod's networks fail until the record is rebuilt from the claim")
	}
}

// logUnjudged logs that the checkpoint cannot be read and what that holds
// back.
func logUnjudged(log *logrus.Entry, claims ClaimStore, err error) {
	u := claims.Unjudged()
	l := log.WithError(err).WithFields(logrus.Fields{"reason": CheckpointReason(err), "missing": len(claims.Missing()),
		"lost": len(u.Lost), "unplaced": u.Unplaced})
	switch {
	case len(u.Unplaced) > 0:
		l.Error("DRA: cannot read the kubelet's DRA checkpoint, and prepared-claim records of claims nri-cni cannot place " +
			"are unreadable: every pod nri-cni has not attached before is held back until the checkpoint can be read or the " +
			"kubelet prepares or unprepares those claims again (docs/dra.md)")
	case u.Judged:
		l.Warn("DRA: cannot read the kubelet's DRA checkpoint: the claims found missing at its last read stay held back; " +
			"nothing else is judged until it can be read")
	default:
		l.Warn("DRA: cannot read the kubelet's DRA checkpoint: a lost prepared-claim record is detected only for pods " +
			"nri-cni attached before (docs/dra.md)")
	}
}

// checkpointReport is what `nri-cni status` shows of the checkpoint at
// path (err: why it cannot be read) and the claims held back.
func checkpointReport(path string, err error, claims ClaimStore, now time.Time) state.CheckpointReport {
	r := state.CheckpointReport{Since: now.UTC(), Path: path, Readable: err == nil}
	if err != nil {
		r.Reason, r.Error = CheckpointReason(err), err.Error()
	}
	u := claims.Unjudged()
	for _, m := range append(claims.Missing(), u.Lost...) {
		r.HeldBack = append(r.HeldBack, fmt.Sprintf("%s (uid %s, pods %s): %s", m, m.UID, strings.Join(m.Pods, ","), m.Reason))
	}
	r.Unplaced = u.Unplaced
	return r
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
	d        *Driver
	path     string
	readErr  string                  // the last checkpoint error logged
	told     *string                 // the checkpoint's error (or "") last told the Reporter
	reported *state.CheckpointReport // the report last saved
	warned   map[string]string       // claim UID -> the warning given
	stale    map[string]bool         // claim UIDs reported stale
}

func newRecordKeeper(d *Driver, path string) *recordKeeper {
	return &recordKeeper{d: d, path: path, warned: map[string]string{}, stale: map[string]bool{}}
}

// pass is one comparison.
func (k *recordKeeper) pass(ctx context.Context) {
	log, claims := k.d.o.Log, k.d.o.Claims
	held, err := ReadKubeletClaims(k.path, DriverName)
	k.tell(err)
	if err != nil {
		claims.CannotJudge(err.Error())
		if err.Error() != k.readErr {
			logUnjudged(log, claims, err)
			k.readErr = err.Error()
		}
		// What can be named is rebuilt: the claims found missing at the
		// last read, and those the attachment records name.
		if k.rebuild(ctx, append(claims.Missing(), claims.Unjudged().Lost...)) {
			k.save(err)
		}
		return
	}
	if k.readErr != "" {
		log.WithField("path", k.path).Info("DRA: the kubelet's DRA checkpoint can be read again")
	}
	k.readErr = ""
	if !k.rebuild(ctx, claims.Reconcile(held)) {
		return
	}
	for _, pc := range claims.Stale(held) {
		if k.stale[pc.UID] || time.Since(pc.Prepared) < staleAfter {
			continue
		}
		k.stale[pc.UID] = true
		log.WithFields(logrus.Fields{"claim": pc.Name, "namespace": pc.Namespace, "uid": pc.UID, "prepared": pc.Prepared}).
			Warn("DRA: a prepared-claim record of a claim the kubelet does not hold: kept (the kubelet unprepares only what it holds)")
	}
	k.save(nil)
}

// tell tells the Reporter, if it hears of the checkpoint, what became of
// it (err: why it cannot be read), when that changed.
func (k *recordKeeper) tell(err error) {
	said := ""
	if err != nil {
		said = err.Error()
	}
	if k.told != nil && *k.told == said {
		return
	}
	k.told = &said
	if r, ok := k.d.o.Reporter.(CheckpointReporter); ok {
		reason := ""
		if err != nil {
			reason = CheckpointReason(err)
		}
		r.KubeletCheckpoint(k.path, reason, err)
	}
}

// save saves the report for `nri-cni status` when it changed.
func (k *recordKeeper) save(err error) {
	r := checkpointReport(k.path, err, k.d.o.Claims, time.Now())
	if k.reported != nil && k.reported.Same(r) {
		return
	}
	if err := k.d.o.Claims.SaveReport(r); err != nil {
		k.d.o.Log.WithError(err).Warn("DRA: the report of the kubelet's DRA checkpoint is not saved for nri-cni status")
		return
	}
	k.reported = &r
}

// rebuild rebuilds the records of missing where it can (at most
// maxRebuildsPerPass) and warns once per claim and reason about those it
// cannot; false if ctx ended first.
func (k *recordKeeper) rebuild(ctx context.Context, missing []state.MissingClaim) bool {
	log := k.d.o.Log
	for i, m := range missing {
		if ctx.Err() != nil {
			return false
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
	return true
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
