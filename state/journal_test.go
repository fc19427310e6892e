package state

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestJournalAppendsAndReadsTheLastRecord(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{ID: "sb1", Phase: PhaseAdding}
	if err := s.Put(rec); err != nil {
		t.Fatal(err)
	}
	rec.Phase = PhaseAttached
	if err := s.Put(rec); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(s.Dir(), "sb1.json"))
	if n := bytes.Count(data, []byte("\n")); n != 2 {
		t.Fatalf("journal has %d lines, want 2 (an append, not a rewrite)", n)
	}
	got, err := s.Get("sb1")
	if err != nil || got.Phase != PhaseAttached {
		t.Fatalf("Get = %+v, %v; want the last record (attached)", got, err)
	}
}

func TestJournalTornTailFallsBack(t *testing.T) {
	s, _ := Open(t.TempDir())
	if err := s.Put(&Record{ID: "sb1", Phase: PhaseAttached}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(s.Dir(), "sb1.json"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"id":"sb1","phase":"torn`) // a crash mid-append
	f.Close()
	got, err := s.Get("sb1")
	if err != nil || got.Phase != PhaseAttached {
		t.Fatalf("Get = %+v, %v; want the last complete record", got, err)
	}
	// The next Put appends after the torn bytes; it must still be readable.
	if err := s.Put(&Record{ID: "sb1", Phase: PhaseTornDown}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("sb1"); err != nil || got.Phase != PhaseTornDown {
		t.Fatalf("after a torn tail, Get = %+v, %v; want torndown", got, err)
	}
}

func TestJournalIsCompacted(t *testing.T) {
	s, _ := Open(t.TempDir())
	rec := &Record{ID: "sb1", Phase: PhaseAttached, Networks: []Network{{Name: "n", IfName: "net1", IPs: []string{"10.0.0.1/24"}}}}
	for i := 0; i < 200; i++ {
		if err := s.Put(rec); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(filepath.Join(s.Dir(), "sb1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > compactAt+1024 {
		t.Fatalf("journal is %d bytes after 200 writes; compaction should keep it near %d", st.Size(), compactAt)
	}
	if st.Mode().Perm() != fileMod {
		t.Fatalf("mode %v, want %v", st.Mode().Perm(), os.FileMode(fileMod))
	}
	if _, err := s.Get("sb1"); err != nil {
		t.Fatal(err)
	}
}
