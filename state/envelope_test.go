package state

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Record lines carry their format version and checksum; older lines are
// read; a bad checksum falls back to the line before; a newer format is
// refused, naming the file and what to do; an older nri-cni still reads
// what this one writes.
func TestRecordFormat(t *testing.T) {
	legacy := func(phase Phase) string {
		data, err := json.Marshal(&Record{ID: "sb1", Kind: "pod", Phase: phase})
		require.NoError(t, err)
		return string(data)
	}
	current := func(phase Phase) string { return string(sealed([]byte(legacy(phase)))) }
	flip := func(line string) string { return strings.Replace(line, `"kind":"pod"`, `"kind":"pbd"`, 1) }
	tests := []struct {
		name    string
		lines   []string
		want    Phase
		wantErr []string
	}{
		{name: "current", lines: []string{current(PhaseAdding), current(PhaseAttached)}, want: PhaseAttached},
		{name: "an older nri-cni's (format 0)", lines: []string{legacy(PhaseAttached)}, want: PhaseAttached},
		{name: "format 0, then current", lines: []string{legacy(PhaseAdding), current(PhaseAttached)}, want: PhaseAttached},
		{name: "a bad checksum counts as a torn line", lines: []string{current(PhaseAdding), flip(current(PhaseAttached))}, want: PhaseAdding},
		{name: "only a bad checksum", lines: []string{flip(current(PhaseAttached))}, wantErr: []string{"corrupt record", "checksum mismatch"}},
		{name: "a newer format", lines: []string{current(PhaseAdding), `{"v":2,"sum":"00000000","id":"sb1","phase":"attached"}`},
			wantErr: []string{"corrupt record", "sb1.json", "record of a newer nri-cni: format 2, this nri-cni reads formats up to 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "sb1.json"), []byte(strings.Join(tc.lines, "\n")+"\n"), 0o600))
			rec, err := s.Get("sb1")
			if tc.wantErr != nil {
				require.Error(t, err)
				assert.True(t, errors.Is(err, ErrCorrupt), "unreadable: %v", err)
				for _, w := range tc.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, rec.Phase)
			assert.Equal(t, "pod", rec.Kind)
		})
	}

	t.Run("what Put writes", func(t *testing.T) {
		s, err := Open(t.TempDir())
		require.NoError(t, err)
		require.NoError(t, s.Put(&Record{ID: "sb1", Kind: "pod", Phase: PhaseAttached, Networks: []Network{{Name: "n", IfName: "net1"}}}))
		data, err := os.ReadFile(filepath.Join(s.Dir(), "sb1.json"))
		require.NoError(t, err)
		assert.Regexp(t, `^\{"v":1,"sum":"[0-9a-f]{8}","id":"sb1",`, string(data))
		var old Record // an older nri-cni decodes the line as it is: a rollback keeps the records
		require.NoError(t, json.Unmarshal(data, &old))
		assert.Equal(t, "sb1", old.ID)
		assert.Equal(t, PhaseAttached, old.Phase)
		assert.Equal(t, "net1", old.Networks[0].IfName)
	})
}

// Prepared-claim records carry the same envelope: an older nri-cni's file
// loads, a newer format's is a load error naming it, and Put writes the
// current format.
func TestClaimRecordFormat(t *testing.T) {
	dir := t.TempDir()
	claims := filepath.Join(dir, "claims")
	require.NoError(t, os.MkdirAll(claims, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(claims, "uid-old.json"), []byte(`{"uid":"uid-old","namespace":"ns1","name":"c1"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(claims, "uid-new.json"), []byte(`{"v":9,"sum":"00000000","uid":"uid-new"}`), 0o600))
	c, err := OpenClaims(dir)
	require.NoError(t, err)
	_, ok := c.Get("uid-old")
	assert.True(t, ok, "an older nri-cni's claim record loads")
	require.Len(t, c.LoadErrors(), 1)
	assert.Contains(t, c.LoadErrors()[0].Error(), "uid-new.json")
	assert.Contains(t, c.LoadErrors()[0].Error(), "format 9, this nri-cni reads formats up to 1")

	require.NoError(t, c.Put(&PreparedClaim{UID: "uid-old", Namespace: "ns1", Name: "c1"}))
	data, err := os.ReadFile(filepath.Join(claims, "uid-old.json"))
	require.NoError(t, err)
	assert.Regexp(t, `^\{"v":1,"sum":"[0-9a-f]{8}","uid":"uid-old",`, string(data))
	again, err := OpenClaims(dir)
	require.NoError(t, err)
	_, ok = again.Get("uid-old")
	assert.True(t, ok, "read back")
}

// The MultiNetworkPolicy state is an optional field of the same format: a
// record without it (an older nri-cni's, or a pod never programmed) loads
// with none, one with it round-trips, and an older nri-cni, which knows
// no such field, still reads the line.
func TestRecordPolicyField(t *testing.T) {
	tests := []struct {
		name   string
		policy *Policy
	}{
		{name: "without", policy: nil},
		{name: "with a digest", policy: &Policy{Digest: "v1-abc"}},
		{name: "quarantined", policy: &Policy{Digest: "v1-abc", Quarantined: []string{"net1", "net2"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			require.NoError(t, err)
			require.NoError(t, s.Put(&Record{ID: "sb1", Kind: "pod", Phase: PhaseAttached, Policy: tc.policy,
				Networks: []Network{{Name: "n", IfName: "net1"}}}))
			rec, err := s.Get("sb1")
			require.NoError(t, err)
			assert.Equal(t, tc.policy, rec.Policy)

			data, err := os.ReadFile(filepath.Join(s.Dir(), "sb1.json"))
			require.NoError(t, err)
			assert.Equal(t, tc.policy != nil, strings.Contains(string(data), `"policy":`), "omitted when nil")
			var old struct { // an older nri-cni's Record: no policy field
				ID       string    `json:"id"`
				Phase    Phase     `json:"phase"`
				Networks []Network `json:"networks"`
			}
			require.NoError(t, json.Unmarshal(data, &old))
			assert.Equal(t, PhaseAttached, old.Phase)
			assert.Equal(t, "net1", old.Networks[0].IfName)
		})
	}

	t.Run("an older record loads without it", func(t *testing.T) {
		s, err := Open(t.TempDir())
		require.NoError(t, err)
		line := string(sealed([]byte(`{"id":"sb1","kind":"pod","phase":"attached","networks":[{"name":"n","ifname":"net1"}],"created":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:00Z"}`)))
		require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "sb1.json"), []byte(line+"\n"), 0o600))
		rec, err := s.Get("sb1")
		require.NoError(t, err)
		assert.Nil(t, rec.Policy)
		assert.Equal(t, PhaseAttached, rec.Phase)
	})
}
