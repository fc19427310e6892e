package dra

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nri-cni/nri-cni/plan"
	"github.com/nri-cni/nri-cni/state"
)

// checkpointHeard is the driver's Reporter: what it was told of the
// kubelet's checkpoint ("" = read).
type checkpointHeard struct{ told []string }

func (h *checkpointHeard) Unpublished([]Skip) {}

func (h *checkpointHeard) KubeletCheckpoint(_, reason string, err error) {
	assert.Equal(nil, reason == "", err == nil)
	h.told = append(h.told, reason)
}

// unreadableCheckpoint makes the kubelet's checkpoint at path unreadable
// for reason.
func unreadableCheckpoint(t *testing.T, path, reason string) {
	t.Helper()
	from := map[string]string{CheckpointVersion: "other-version", CheckpointChecksum: "corrupt"}[reason]
	if from == "" {
		require.NoError(t, os.RemoveAll(path))
		return
	}
	data, err := os.ReadFile(filepath.Join("testdata", "kubelet", from))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// attachedSandbox records a sandbox of pod attached with the networks of
// devs (claim devices), as the engine records one.
func attachedSandbox(t *testing.T, stateDir, id, pod string, devs []state.ClaimDevice) {
	t.Helper()
	store, err := state.Open(stateDir)
	require.NoError(t, err)
	rec := &state.Record{ID: id, Kind: "pod", Namespace: "team", Name: "app", UID: pod, Phase: state.PhaseAttached,
		Created: time.Now().UTC()}
	for _, d := range devs {
		ref := d.Ref
		rec.Networks = append(rec.Networks, state.Network{Name: d.Network, IfName: "data0", Claim: &ref})
	}
	require.NoError(t, store.Put(rec))
}

// Issue 41, item 7: the kubelet's checkpoint of another version, with a
// bad checksum, or missing is reported (the Reporter: the gauge and the
// Node's Event, once per reason; the report `nri-cni status` prints,
// naming the file and the error) and fails closed what it cannot judge: a
// pod nri-cni attached before whose claim record is gone does not start
// without the claim's network (the error names the claim and the
// checkpoint) until the record is rebuilt from the claim; a pod nri-cni
// has not attached before is not held back for it.
func TestUnreadableCheckpointReportedAndFailsClosed(t *testing.T) {
	for _, reason := range []string{CheckpointVersion, CheckpointChecksum, CheckpointMissing} {
		t.Run(reason, func(t *testing.T) {
			ctx := context.Background()
			stateDir, kubelet := t.TempDir(), filepath.Join(t.TempDir(), CheckpointFile)
			claims, err := state.OpenClaims(stateDir)
			require.NoError(t, err)
			d, _, _ := recordsDriver(t, claims, nil)
			c := claim("team", "net", map[string]string{"a": d.Published().Devices[0].Name},
				opaque(resourceapi.AllocationConfigSourceClaim, `"interface":"data0"`))
			_, err = d.prepare(c)
			require.NoError(t, err)
			attachedSandbox(t, stateDir, "sandbox-1", "pod-uid", claims.ForPod("pod-uid"))

			// nri-cni restarts: the claim's record is gone, the kubelet's
			// checkpoint cannot be read.
			require.NoError(t, os.Remove(filepath.Join(stateDir, "claims", "uid-net.json")))
			unreadableCheckpoint(t, kubelet, reason)
			claims, err = state.OpenClaims(stateDir)
			require.NoError(t, err)
			CheckRecordsAtStart(claims, kubelet, quietLog())
			d, planner, sink := recordsDriver(t, claims, nil)
			heard := &checkpointHeard{}
			d.o.Reporter = heard
			planPod := func(pod string) error {
				_, err := planner.Plan(ctx, plan.Pod{Namespace: "team", Claims: claims.ForPod(pod)})
				return err
			}

			err = planPod("pod-uid")
			require.ErrorIs(t, err, plan.ErrClaimRecordMissing, "the pod's next sandbox does not start without the claim")
			for _, part := range []string{"ResourceClaim team/net (uid uid-net): no record of the prepared claim: its prepared-claim record",
				"is missing; an earlier sandbox of the pod had its network", "nri-cni cannot read the kubelet's DRA checkpoint to judge it",
				kubelet} {
				assert.Contains(t, err.Error(), part)
			}
			require.NoError(t, planPod("pod-new"), "a checkpoint nri-cni cannot read alone holds back no pod")

			report := func() state.CheckpointReport {
				r, err := state.ReadCheckpointReport(stateDir)
				require.NoError(t, err)
				return r
			}
			r := report()
			assert.False(t, r.Readable)
			assert.Equal(t, kubelet, r.Path)
			assert.Equal(t, reason, r.Reason)
			assert.Contains(t, r.Error, kubelet)
			require.Len(t, r.HeldBack, 1)
			assert.Contains(t, r.HeldBack[0], "team/net (uid uid-net, pods pod-uid): its prepared-claim record")
			assert.Empty(t, r.Unplaced)

			// The keeper tells the Reporter once, and cannot rebuild yet.
			k := newRecordKeeper(d, kubelet)
			k.pass(ctx)
			k.pass(ctx)
			assert.Equal(t, []string{reason}, heard.told)
			require.Len(t, sink.warnings, 1)
			assert.Contains(t, sink.warnings[0], "could not rebuild it (no API client)")
			require.ErrorIs(t, planPod("pod-uid"), plan.ErrClaimRecordMissing)

			// The claim can be read: rebuilt from it, the pod attaches.
			d.o.Client = fake.NewClientset(c)
			k.pass(ctx)
			p, err := planner.Plan(ctx, plan.Pod{Namespace: "team", Claims: claims.ForPod("pod-uid")})
			require.NoError(t, err)
			last := p.Attachments[len(p.Attachments)-1]
			require.NotNil(t, last.Claim, "the claim's attachment")
			assert.Equal(t, "data0", last.IfName)
			assert.Empty(t, report().HeldBack)

			// The checkpoint readable again: told, reported.
			writeKubeletCheckpoint(t, kubelet, entryOf(c, true))
			k.pass(ctx)
			assert.Equal(t, []string{reason, ""}, heard.told)
			assert.True(t, report().Readable)
		})
	}
}

// An unreadable record that no attachment record names may be the claim
// of any pod nri-cni has not attached before: while the checkpoint cannot
// be read, those pods are held back, naming the record and the
// checkpoint, until the kubelet prepares the claim again.
func TestUnplacedRecordHoldsBackNewPods(t *testing.T) {
	ctx := context.Background()
	stateDir, kubelet := t.TempDir(), filepath.Join(t.TempDir(), CheckpointFile)
	claims, err := state.OpenClaims(stateDir)
	require.NoError(t, err)
	d, _, _ := recordsDriver(t, claims, nil)
	c := claim("team", "net", map[string]string{"a": d.Published().Devices[0].Name})
	_, err = d.prepare(c)
	require.NoError(t, err)
	attachedSandbox(t, stateDir, "sandbox-9", "pod-nine", nil) // a pod without claims, attached before

	record := filepath.Join(stateDir, "claims", "uid-net.json")
	require.NoError(t, os.WriteFile(record, nil, 0o600)) // a power loss
	unreadableCheckpoint(t, kubelet, CheckpointVersion)
	claims, err = state.OpenClaims(stateDir)
	require.NoError(t, err)
	CheckRecordsAtStart(claims, kubelet, quietLog())
	d, planner, _ := recordsDriver(t, claims, nil)
	planPod := func(pod string) error {
		_, err := planner.Plan(ctx, plan.Pod{Namespace: "team", Claims: claims.ForPod(pod)})
		return err
	}
	for _, pod := range []string{"pod-uid", "pod-new"} {
		err := planPod(pod)
		require.ErrorIs(t, err, plan.ErrClaimRecordMissing, pod)
		for _, part := range []string{"a prepared claim (uid uid-net) whose pod nri-cni cannot name", record,
			"it may be this one, which nri-cni has not attached before", kubelet} {
			assert.Contains(t, err.Error(), part)
		}
	}
	require.NoError(t, planPod("pod-nine"), "a pod attached before is judged by its records")
	r, err := state.ReadCheckpointReport(stateDir)
	require.NoError(t, err)
	assert.Equal(t, []string{"uid-net"}, r.Unplaced)

	// The kubelet restarts and prepares the claim again.
	_, err = d.prepare(c)
	require.NoError(t, err)
	require.NoError(t, planPod("pod-new"))
	p, err := planner.Plan(ctx, plan.Pod{Namespace: "team", Claims: claims.ForPod("pod-uid")})
	require.NoError(t, err)
	assert.NotNil(t, p.Attachments[len(p.Attachments)-1].Claim, "the claim's attachment")
	newRecordKeeper(d, kubelet).pass(ctx)
	r, err = state.ReadCheckpointReport(stateDir)
	require.NoError(t, err)
	assert.Empty(t, r.Unplaced)
}

func TestCheckpointReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}, CheckpointMissing},
		{&fs.PathError{Op: "open", Path: "/x", Err: fs.ErrPermission}, CheckpointPermission},
		{ErrCheckpointVersion, CheckpointVersion},
		{errors.Join(ErrCheckpointCorrupt, ErrCheckpointChecksum), CheckpointChecksum},
		{ErrCheckpointCorrupt, CheckpointCorrupt},
		{errors.New("EIO"), CheckpointReadError},
	} {
		assert.Equal(t, tc.want, CheckpointReason(tc.err), "%v", tc.err)
		assert.Contains(t, CheckpointReasons, tc.want)
	}
	_, err := ReadKubeletClaims(filepath.Join("testdata", "kubelet", "corrupt"), DriverName)
	assert.Equal(t, CheckpointChecksum, CheckpointReason(err))
}
