package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// attachedPod records a pod sandbox of pod whose networks came from the
// claims of uids (none: a pod without claims).
func attachedPod(t *testing.T, dir, sandbox, pod string, uids ...string) {
	t.Helper()
	s, err := Open(dir)
	require.NoError(t, err)
	rec := &Record{ID: sandbox, Kind: "pod", Namespace: "team", Name: "app-" + pod, UID: pod, Phase: PhaseTornDown,
		Created: time.Unix(1, 0).UTC(), Networks: []Network{{Name: "primary-x", IfName: "net1"}}}
	for i, uid := range uids {
		ref := prepared(uid, "claim-"+uid).Devices[0].Ref
		rec.Networks = append(rec.Networks, Network{Name: "a", IfName: "net" + string(rune('2'+i)), Claim: &ref})
	}
	require.NoError(t, s.Put(rec))
}

// standIns is what ForPod holds the pod back for: "claim uid: why".
func standIns(c *Claims, pod string) []string {
	var out []string
	for _, d := range c.ForPod(pod) {
		if d.Unrecorded != "" {
			out = append(out, d.Ref.UID+" "+d.Ref.Namespace+"/"+d.Ref.Name+": "+d.Unrecorded+" | "+d.Unjudged)
		}
	}
	return out
}

// Issue 41, item 7: while the kubelet's DRA checkpoint cannot be read, the
// records hold back exactly the pods whose claim may be lost — a pod
// attached before whose claim has no readable record now, and, while an
// unreadable record nothing names exists, every pod not attached before —
// and no other: an unreadable checkpoint alone holds back no pod.
func TestClaimsWhileTheCheckpointCannotBeRead(t *testing.T) {
	const why = "/k/dra_manager_state: apiVersion v2"
	// The node before nri-cni's restart: pod-a (claim uid-a, its record
	// whole), pod-b (uid-b, its record gone), pod-c (uid-c, its record
	// torn), pod-d (no claim); uid-x's record is torn and no sandbox
	// record names it (its pod has not run a sandbox yet).
	setup := func(t *testing.T, unplaced bool) (*Claims, string) {
		dir := t.TempDir()
		attachedPod(t, dir, "sb-a", "pod-a", "uid-a")
		attachedPod(t, dir, "sb-b", "pod-b", "uid-b")
		attachedPod(t, dir, "sb-c1", "pod-c", "uid-c")
		attachedPod(t, dir, "sb-c2", "pod-c", "uid-c") // an earlier sandbox, same claim: one stand-in
		attachedPod(t, dir, "sb-d", "pod-d")
		c, err := OpenClaims(dir)
		require.NoError(t, err)
		require.NoError(t, c.Put(prepared("uid-a", "claim-uid-a", "pod-a")))
		require.NoError(t, c.Put(prepared("uid-c", "claim-uid-c", "pod-c")))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "claims", "uid-c.json"), []byte(`{"v":1,"sum":"0`), 0o600))
		if unplaced {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "claims", "uid-x.json"), nil, 0o600))
		}
		c, err = OpenClaims(dir)
		require.NoError(t, err)
		return c, dir
	}
	for _, tc := range []struct {
		name     string
		unplaced bool
		steps    func(c *Claims)
		want     map[string][]string // pod -> its stand-ins, each as parts ("…" between) that must appear
		// Unjudged(): "claim uid pods" of rule 1, the UIDs of rule 2.
		lost, unplacedUIDs []string
	}{
		{name: "the checkpoint read at start: nothing of this", unplaced: true, steps: func(c *Claims) { c.Reconcile(nil) },
			want: map[string][]string{}},
		{name: "unreadable from the start: pods attached before whose claim is lost", steps: func(c *Claims) { c.CannotJudge(why) },
			want: map[string][]string{
				"pod-b": {"uid-b team/claim-uid-b: its prepared-claim record " + "CLAIMS/uid-b.json is missing; an earlier sandbox " +
					"of the pod had its network (nri-cni's attachment records) | " + why},
				"pod-c": {"uid-c team/claim-uid-c: its prepared-claim record is unreadable (corrupt record CLAIMS/uid-c.json"},
			}, lost: []string{"team/claim-uid-b uid-b pod-b", "team/claim-uid-c uid-c pod-c"}},
		{name: "and an unreadable record nothing names: every pod not attached before", unplaced: true,
			steps: func(c *Claims) { c.CannotJudge(why) },
			want: map[string][]string{
				"pod-b": {"uid-b team/claim-uid-b"},
				"pod-c": {"uid-c team/claim-uid-c"},
				"pod-new": {"uid-x /: its prepared-claim record is unreadable (corrupt record CLAIMS/uid-x.json: …), and no attachment " +
					"record names its pod: it may be this one, which nri-cni has not attached before | " + why},
			}, lost: []string{"team/claim-uid-b uid-b pod-b", "team/claim-uid-c uid-c pod-c"}, unplacedUIDs: []string{"uid-x"}},
		{name: "it ends when the kubelet prepares the claim again", unplaced: true, steps: func(c *Claims) {
			c.CannotJudge(why)
			require.NoError(t, c.Put(prepared("uid-x", "x", "pod-new")))
			require.NoError(t, c.Put(prepared("uid-b", "claim-uid-b", "pod-b"))) // rebuilt
		}, want: map[string][]string{"pod-c": {"uid-c team/claim-uid-c"}}, lost: []string{"team/claim-uid-c uid-c pod-c"}},
		{name: "or unprepares it", unplaced: true, steps: func(c *Claims) {
			c.CannotJudge(why)
			require.NoError(t, c.Delete("uid-x"))
			require.NoError(t, c.Delete("uid-c"))
		}, want: map[string][]string{"pod-b": {"uid-b team/claim-uid-b"}}, lost: []string{"team/claim-uid-b uid-b pod-b"}},
		{name: "read once, then unreadable: only what that read found missing", unplaced: true, steps: func(c *Claims) {
			c.Reconcile([]HeldClaim{{UID: "uid-c", Namespace: "team", Name: "claim-uid-c", Pods: []string{"pod-c"}}})
			c.CannotJudge(why)
		}, want: map[string][]string{"pod-c": {"uid-c team/claim-uid-c: its prepared-claim record is unreadable (corrupt record " +
			"CLAIMS/uid-c.json… | "}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, dir := setup(t, tc.unplaced)
			tc.steps(c)
			for _, pod := range []string{"pod-a", "pod-b", "pod-c", "pod-d", "pod-new"} {
				got := standIns(c, pod)
				want := tc.want[pod]
				require.Len(t, got, len(want), "pod %s: %v", pod, got)
				for i, w := range want {
					for _, part := range strings.Split(strings.ReplaceAll(w, "CLAIMS", filepath.Join(dir, "claims")), "…") {
						assert.Contains(t, got[i], part, "pod %s", pod)
					}
				}
			}
			// What the driver rebuilds and `status` lists: rule 1's claims
			// with their pod, rule 2's records.
			u := c.Unjudged()
			var lost []string
			for _, m := range u.Lost {
				lost = append(lost, m.String()+" "+m.UID+" "+strings.Join(m.Pods, ","))
			}
			assert.Equal(t, tc.lost, lost)
			assert.Equal(t, tc.unplacedUIDs, u.Unplaced)
		})
	}
}

// The running nri-cni's report for `nri-cni status`, read back from the
// state dir; none without the DRA driver.
func TestCheckpointReportSavedAndRead(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadCheckpointReport(dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
	c, err := OpenClaims(dir)
	require.NoError(t, err)
	r := CheckpointReport{Since: time.Unix(5, 0).UTC(), Path: "/k/dra_manager_state", Reason: "version", Error: "v2",
		HeldBack: []string{"team/a (uid uid-a): gone"}, Unplaced: []string{"uid-x"}}
	require.NoError(t, c.SaveReport(r))
	got, err := ReadCheckpointReport(dir)
	require.NoError(t, err)
	assert.Equal(t, r, got)
	assert.True(t, r.Same(CheckpointReport{Path: r.Path, Reason: "version", Error: "v2", HeldBack: r.HeldBack, Unplaced: r.Unplaced}))
	assert.False(t, r.Same(CheckpointReport{Path: r.Path, Readable: true}))
	c, err = OpenClaims(dir)
	require.NoError(t, err)
	assert.Empty(t, c.LoadErrors(), "the report is not a record")
}
