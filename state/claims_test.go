package state

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func prepared(uid, name string, pods ...string) *PreparedClaim {
	return &PreparedClaim{UID: uid, Namespace: "team", Name: name, Pods: pods, Prepared: time.Unix(1, 0).UTC(),
		Devices: []ClaimDevice{{Ref: ClaimRef{Namespace: "team", Name: name, UID: uid, Request: "net", Driver: "nri-cni.io",
			Pool: "node-1", Device: "net-a-0"}, Network: "a", Configs: []ClaimConfig{{Raw: []byte(`{"kind":"NetworkConfig"}`)}}}}}
}

func TestClaimsPutForPodDeleteAndReopen(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenClaims(dir)
	require.NoError(t, err)
	require.NoError(t, c.Put(prepared("uid-b", "b", "pod-1")))
	require.NoError(t, c.Put(prepared("uid-a", "a", "pod-1")))
	require.NoError(t, c.Put(prepared("uid-c", "c", "pod-2")))

	devs := c.ForPod("pod-1")
	require.Len(t, devs, 2)
	assert.Equal(t, "a", devs[0].Ref.Name, "ordered by claim name")
	assert.Equal(t, "b", devs[1].Ref.Name)
	assert.Empty(t, c.ForPod("pod-9"))

	// Replacing a claim re-indexes it.
	require.NoError(t, c.Put(prepared("uid-b", "b", "pod-3")))
	assert.Len(t, c.ForPod("pod-1"), 1)
	assert.Len(t, c.ForPod("pod-3"), 1)

	// A restart reads them back; a torn file is reported, not fatal.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "claims", "uid-x.json"), []byte(`{"uid":`), 0o600))
	c2, err := OpenClaims(dir)
	require.NoError(t, err)
	require.Len(t, c2.LoadErrors(), 1)
	assert.ErrorIs(t, c2.LoadErrors()[0], ErrCorrupt)
	assert.Len(t, c2.List(), 3)
	got, ok := c2.Get("uid-a")
	require.True(t, ok)
	assert.Equal(t, *prepared("uid-a", "a", "pod-1"), got)

	require.NoError(t, c2.Delete("uid-a"))
	require.NoError(t, c2.Delete("uid-a"), "deleting twice is fine (unprepare is retried)")
	assert.Empty(t, c2.ForPod("pod-1"))
	_, err = os.Stat(filepath.Join(dir, "claims", "uid-a.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestClaimsRefuseBadUIDs(t *testing.T) {
	c, err := OpenClaims(t.TempDir())
	require.NoError(t, err)
	for _, uid := range []string{"", "../x", "a/b", ".hidden"} {
		assert.ErrorIs(t, c.Put(prepared(uid, "x")), ErrBadID, uid)
	}
	// A file holding another claim's UID is refused on open.
	dir := t.TempDir()
	c, err = OpenClaims(dir)
	require.NoError(t, err)
	require.NoError(t, c.Put(prepared("uid-a", "a", "pod-1")))
	require.NoError(t, os.Rename(filepath.Join(dir, "claims", "uid-a.json"), filepath.Join(dir, "claims", "uid-b.json")))
	c, err = OpenClaims(dir)
	require.NoError(t, err)
	assert.Len(t, c.LoadErrors(), 1)
	assert.Empty(t, c.List())
}
