package state

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func heldClaim(uid, name string, pods ...string) HeldClaim {
	return HeldClaim{UID: uid, Namespace: "team", Name: name, Pods: pods,
		Devices: []HeldDevice{{Requests: []string{"a"}, Pool: "node-1", Device: "dev-" + name}}}
}

// The claims the kubelet holds as prepared, compared with the records: a
// missing or unreadable record becomes a stand-in in ForPod (planning
// refuses it), until a record is written, the claim is unprepared, or the
// kubelet no longer holds it.
func TestReconcile(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenClaims(dir)
	require.NoError(t, err)
	recorded := prepared("uid-1", "one", "pod-a")
	require.NoError(t, c.Put(recorded))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "claims", "uid-2.json"), []byte(`{"uid":`), 0o600))
	c, err = OpenClaims(dir)
	require.NoError(t, err)
	require.Len(t, c.LoadErrors(), 1)

	held := []HeldClaim{heldClaim("uid-1", "one", "pod-a"), heldClaim("uid-2", "two", "pod-a"),
		heldClaim("uid-3", "three", "pod-a", "pod-b"), heldClaim("../x", "bad", "pod-a")}
	missing := c.Reconcile(held)
	require.Len(t, missing, 2, "recorded, and an invalid UID, are not missing")
	assert.Equal(t, "team/three", missing[0].String())
	assert.Equal(t, "its prepared-claim record "+filepath.Join(dir, "claims", "uid-3.json")+" is missing", missing[0].Reason)
	assert.Equal(t, "team/two", missing[1].String())
	assert.Contains(t, missing[1].Reason, "its prepared-claim record is unreadable (corrupt record "+filepath.Join(dir, "claims", "uid-2.json"))

	devs := c.ForPod("pod-a")
	require.Len(t, devs, 3)
	assert.Empty(t, devs[0].Unrecorded, "the recorded claim first")
	assert.Equal(t, ClaimRef{Namespace: "team", Name: "three", UID: "uid-3", Request: "a", Driver: "nri-cni.io", Pool: "node-1",
		Device: "dev-three"}, devs[1].Ref)
	assert.NotEmpty(t, devs[1].Unrecorded)
	assert.Equal(t, "two", devs[2].Ref.Name)
	require.Len(t, c.ForPod("pod-b"), 1, "a stand-in for each of the claim's pods")

	// A record written (rebuilt, or the kubelet prepared it again) ends it.
	require.NoError(t, c.Put(prepared("uid-2", "two", "pod-a")))
	assert.Len(t, c.Missing(), 1)
	// So does an unprepare, also while the kubelet's checkpoint still
	// lists the claim (it writes it after the driver's unprepare).
	require.NoError(t, c.Delete("uid-3"))
	assert.Empty(t, c.Missing())
	assert.Empty(t, c.ForPod("pod-b"))
	assert.Empty(t, c.Reconcile(held[:3]), "unprepared here: not missing while still listed")
	c.Reconcile(held[:2])
	assert.Len(t, c.Reconcile(held[:3]), 1, "listed again after the kubelet dropped it: missing")
	require.NoError(t, c.Delete("uid-3"))

	// No longer held: forgotten.
	c.Reconcile([]HeldClaim{heldClaim("uid-4", "four", "pod-c")})
	require.Len(t, c.ForPod("pod-c"), 1)
	c.Reconcile(nil)
	assert.Empty(t, c.ForPod("pod-c"))
	assert.Len(t, c.ForPod("pod-a"), 2, "the records stay")

	// Records of claims the kubelet does not hold.
	stale := c.Stale([]HeldClaim{heldClaim("uid-1", "one", "pod-a")})
	require.Len(t, stale, 1)
	assert.Equal(t, "two", stale[0].Name)
}
