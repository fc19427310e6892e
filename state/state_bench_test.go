package state

import (
	"fmt"
	"testing"
	"time"
)

func BenchmarkPut(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	rec := &Record{Kind: "pod", Namespace: "bench", Name: "p", Phase: PhaseAttached, Created: time.Now(),
		Networks: []Network{{Name: "sec", IfName: "net1", IPs: []string{"10.1.2.3/24"}}}}
	for i := 0; b.Loop(); i++ {
		rec.ID = fmt.Sprintf("sb%d", i%64)
		if err := s.Put(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Put(&Record{ID: "sb1", Phase: PhaseAttached}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get("sb1"); err != nil {
			b.Fatal(err)
		}
	}
}
