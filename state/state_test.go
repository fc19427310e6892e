package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nri-cni/nri-cni/state"
)

const hexID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func openStore(t *testing.T) *state.Store {
	t.Helper()
	s, err := state.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func record(id string) *state.Record {
	now := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	return &state.Record{
		ID: id, Kind: "pod", Namespace: "ns", Name: "pod", UID: "uid-1",
		Netns: "/var/run/netns/x", NetnsDev: 4, NetnsIno: 4026532000,
		Phase:    state.PhaseAttached,
		Networks: []state.Network{{Name: "a", IfName: "net1", IPs: []string{"10.0.0.2/24"}, Mac: "aa:bb:cc:dd:ee:ff"}},
		Created:  now, Updated: now.Add(time.Second),
	}
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestOpenMode(t *testing.T) {
	t.Parallel()
	t.Run("creates 0700", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "a", "b")
		s, err := state.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if s.Dir() != dir {
			t.Errorf("Dir() = %q, want %q", s.Dir(), dir)
		}
		if m := mode(t, dir); m != 0o700 {
			t.Errorf("mode = %o, want 700", m)
		}
	})
	t.Run("tightens existing 0755", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "s")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil { // defeat umask
			t.Fatal(err)
		}
		if _, err := state.Open(dir); err != nil {
			t.Fatal(err)
		}
		if m := mode(t, dir); m != 0o700 {
			t.Errorf("mode = %o, want 700", m)
		}
	})
	t.Run("path is a file", func(t *testing.T) {
		t.Parallel()
		f := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := state.Open(f); err == nil {
			t.Error("Open(file): want error")
		}
	})
}

func TestValidID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{hexID, "t1", "a", "A_b+c.d-e", strings.Repeat("a", 128)} {
		if err := state.ValidID(id); err != nil {
			t.Errorf("ValidID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "../x", "a/b", "..", ".hidden", "a..b", "-x", "a b", "t1\n", "/abs",
		strings.Repeat("a", 129)} {
		err := state.ValidID(id)
		if !errors.Is(err, state.ErrBadID) {
			t.Errorf("ValidID(%q) = %v, want ErrBadID", id, err)
		}
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	for _, id := range []string{hexID, "t1"} {
		want := record(id)
		if err := s.Put(want); err != nil {
			t.Fatalf("Put(%s): %v", id, err)
		}
		p := filepath.Join(s.Dir(), id+".json")
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s: mode = %o, want 600", p, m)
		}
		got, err := s.Get(id)
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Get(%s) = %+v\nwant %+v", id, got, want)
		}
	}
	// Overwrite: the new record replaces the old one.
	rec := record("t1")
	rec.Phase = state.PhaseTornDown
	if err := s.Put(rec); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("t1"); err != nil || got.Phase != state.PhaseTornDown {
		t.Errorf("Get after overwrite = %+v, %v", got, err)
	}
	// No temporary file is left behind.
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{hexID + ".json", "t1.json"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("dir holds %q, want %q", names, want)
	}
}

func TestPutBadID(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	for _, id := range []string{"", "../x", "a/b"} {
		if err := s.Put(record(id)); !errors.Is(err, state.ErrBadID) {
			t.Errorf("Put(%q) = %v, want ErrBadID", id, err)
		}
		if _, err := s.Get(id); !errors.Is(err, state.ErrBadID) {
			t.Errorf("Get(%q) = %v, want ErrBadID", id, err)
		}
		if err := s.Delete(id); !errors.Is(err, state.ErrBadID) {
			t.Errorf("Delete(%q) = %v, want ErrBadID", id, err)
		}
	}
}

func TestGetMissing(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	_, err := s.Get("t1")
	if !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
}

func TestGetCorrupt(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"garbage":      "{not json",
		"empty":        "",
		"wrong type":   `{"id": 5}`,
		"id differs":   `{"id": "other", "phase": "attached"}`,
		"id missing":   `{"phase": "attached"}`,
		"truncated ok": `{"id": "t1", "phase": "att`,
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t)
			p := filepath.Join(s.Dir(), "t1.json")
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := s.Get("t1")
			if !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("Get = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("Get = %q, want the message to contain %s", err, p)
			}
		})
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	if recs, errs := s.List(); len(recs) != 0 || len(errs) != 0 {
		t.Fatalf("List(empty) = %v, %v", recs, errs)
	}
	for _, id := range []string{"c", "a", hexID, "b"} {
		if err := s.Put(record(id)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) string {
		p := filepath.Join(s.Dir(), name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badJSON := write("bad1.json", "garbage")
	badID := write("bad2.json", `{"id": "someone-else"}`)
	write(".hidden.json", "garbage")        // dotfile: ignored
	write(".t9.tmp-123", "garbage")         // leftover temp file: ignored
	write("notes.txt", "garbage")           // not .json: ignored
	write("d.json.bak", `{"id": "d.json"}`) // not .json: ignored
	if err := os.Mkdir(filepath.Join(s.Dir(), "sub.json"), 0o700); err != nil {
		t.Fatal(err)
	}

	recs, errs := s.List()
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if want := []string{hexID, "a", "b", "c"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("List ids = %q, want %q", ids, want)
	}
	if len(errs) != 2 {
		t.Fatalf("List errs = %v, want 2", errs)
	}
	joined := errors.Join(errs...).Error()
	for _, p := range []string{badJSON, badID} {
		if !strings.Contains(joined, p) {
			t.Errorf("List errs %q do not name %s", joined, p)
		}
	}
	for _, err := range errs {
		if !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("List err %v, want ErrCorrupt", err)
		}
	}
}

func TestListFileWithInvalidID(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	if err := s.Put(record("good")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(s.Dir(), "bad id.json")
	if err := os.WriteFile(p, []byte(`{"id": "bad id"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, errs := s.List()
	if len(recs) != 1 || recs[0].ID != "good" {
		t.Errorf("List recs = %v, want [good]", recs)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "bad id") {
		t.Errorf("List errs = %v, want one error naming \"bad id\"", errs)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	if err := s.Delete("t1"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
	if err := s.Put(record("t1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("t1"); err != nil {
		t.Errorf("Delete = %v", err)
	}
	if _, err := s.Get("t1"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete("t1"); err != nil {
		t.Errorf("second Delete = %v, want nil", err)
	}
}
