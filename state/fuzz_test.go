package state

// Fuzz target for the record journal: whatever a record file holds (a torn
// write, a power loss, garbage), reading it never panics, never returns
// another sandbox's record, reports what it cannot read as corrupt, and the
// next Put makes the file good again. Plain `go test` runs the seeds;
// `make fuzz` runs the target for a while.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func FuzzJournal(f *testing.F) {
	good := func(id string, phase Phase) string {
		data, err := json.Marshal(&Record{ID: id, Kind: "pod", Phase: phase, Networks: []Network{{Name: "n", IfName: "net1"}}})
		if err != nil {
			f.Fatal(err)
		}
		return string(data)
	}
	for _, s := range []string{
		good("sb1", PhaseAdding) + "\n",
		good("sb1", PhaseAdding) + "\n" + good("sb1", PhaseAttached) + "\n",
		good("sb1", PhaseAttached) + "\n" + `{"id":"sb1","phase":"torn`,
		good("sb1", PhaseAttached) + "\n\n\n",
		good("other", PhaseAttached) + "\n",
		good("sb1", PhaseAttached) + "\n" + good("other", PhaseAttached),
		`{"ID":"sb1","PHASE":"attached"}`, `{"id":"sb1","id":"other"}`, `{"id":"other","id":"sb1"}`,
		`{"id":"sb1","networks":[{"name":"../../etc","ifname":"net1"}]}`, `{"id":"sb1","netnsIno":-1}`,
		`{"id":"sb1","created":"not a time"}`, `{"id":"sb1","netnsDev":1e400}`, `{"id":"sb1","netnsDev":18446744073709551616}`,
		`{"id":"sb1","name":"\ud800\u0000é"}`, "{\"id\":\"sb1\"}\r\n", "\xff\xfe{\"id\":\"sb1\"}",
		"", "\n", "\x00\x00\x00\x00", "null", "null\n", "[]", "{}", `"sb1"`, "1",
		strings.Repeat("[", 20000), `{"id":"sb1","networks":` + strings.Repeat("[", 10000) + `}`,
		strings.Repeat("x", 9<<10), // past compactAt: the next Put rewrites
		strings.Repeat(good("sb1", PhaseAttached)+"\n", 200),
		string(sealed([]byte(good("sb1", PhaseAttached)))) + "\n",
		good("sb1", PhaseAdding) + "\n" + string(sealed([]byte(good("sb1", PhaseAttached)))) + "\n",
		`{"v":2,"sum":"00000000","id":"sb1","phase":"attached"}` + "\n",
		good("sb1", PhaseAdding) + "\n" + `{"v":1,"sum":"00000000","id":"sb1","phase":"attached"}` + "\n",
		`{"v":1,"sum":"0000`, `{"v":-1,"sum":"00000000","id":"sb1"}`, `{"v":1}`, `{"v":99999999999999999999,`,
	} {
		f.Add("sb1", []byte(s))
	}
	for _, id := range []string{"../sb1", "..", ".", "sb1/../x", "", "sb1.json", "-x", "é", strings.Repeat("a", 129), strings.Repeat("a", 128)} {
		f.Add(id, []byte(good(id, PhaseAttached)+"\n"))
	}
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	root := f.TempDir() // one per process: inputs run one at a time
	f.Fuzz(func(t *testing.T, id string, data []byte) {
		if err := os.RemoveAll(filepath.Join(root, "state")); err != nil {
			t.Fatal(err)
		}
		s, err := Open(filepath.Join(root, "state"))
		if err != nil {
			t.Fatal(err)
		}
		next := &Record{ID: id, Kind: "pod", Namespace: "ns1", Name: "web", Phase: PhaseAttached,
			Networks: []Network{{Name: "net-a", IfName: "net1", IPs: []string{"10.0.0.5/24"}}}, Created: at, Updated: at}
		if ValidID(id) != nil {
			if _, err := s.Get(id); !errors.Is(err, ErrBadID) {
				t.Fatalf("Get(%q) = %v, want ErrBadID", id, err)
			}
			if err := s.Put(next); !errors.Is(err, ErrBadID) {
				t.Fatalf("Put(%q) = %v, want ErrBadID", id, err)
			}
			checkFuzzRoot(t, root, nil)
			return
		}
		if err := os.WriteFile(filepath.Join(s.Dir(), id+suffix), data, fileMod); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(id)
		switch {
		case err == nil && (rec == nil || rec.ID != id):
			t.Fatalf("Get(%q) returned the record of %+v", id, rec)
		case err != nil && (rec != nil || !errors.Is(err, ErrCorrupt)):
			t.Fatalf("Get(%q) of an unreadable file: %+v, %v; want ErrCorrupt", id, rec, err)
		}
		recs, errs := s.List()
		if err == nil {
			if len(errs) != 0 || len(recs) != 1 || !sameRecord(recs[0], rec) {
				t.Fatalf("List = %v, %v; want the record Get read", recs, errs)
			}
		} else {
			var re *RecordError
			if len(recs) != 0 || len(errs) != 1 || !errors.As(errs[0], &re) || re.ID != id || !errors.Is(errs[0], ErrCorrupt) {
				t.Fatalf("List = %v, %v; want one *RecordError for %q wrapping ErrCorrupt", recs, errs, id)
			}
		}
		// The journal survives whatever its tail holds: the next records
		// are the ones read.
		for _, phase := range []Phase{PhaseAttached, PhaseTornDown} {
			next.Phase = phase
			if err := s.Put(next); err != nil {
				t.Fatalf("Put after %q: %v", data, err)
			}
			got, err := s.Get(id)
			if err != nil || !sameRecord(got, next) {
				t.Fatalf("Get after Put = %+v, %v; want %+v", got, err, next)
			}
			if recs, errs := s.List(); len(errs) != 0 || len(recs) != 1 || !sameRecord(recs[0], next) {
				t.Fatalf("List after Put = %v, %v", recs, errs)
			}
		}
		checkFuzzRoot(t, root, []string{id + suffix})
	})
}

// sameRecord compares records as they are stored.
func sameRecord(a, b *Record) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// checkFuzzRoot: nothing was written outside the state dir, and the state
// dir holds exactly files (no temp files left).
func checkFuzzRoot(t *testing.T, root string, files []string) {
	t.Helper()
	top, err := os.ReadDir(root)
	if err != nil || len(top) != 1 || top[0].Name() != "state" {
		t.Fatalf("outside the state dir: %v %v", top, err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "state"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, "\n") != strings.Join(files, "\n") {
		t.Fatalf("state dir holds %q, want %q", names, files)
	}
}
