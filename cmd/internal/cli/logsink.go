package cli

import (
	"bytes"
	"io"
	"sync"
)

// logSink holds log output in memory until its destination is known, then
// hands what it held to the destination and writes through from then on.
type logSink struct {
	mu   sync.Mutex
	held bytes.Buffer
	dst  io.Writer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dst != nil {
		return s.dst.Write(p)
	}
	return s.held.Write(p)
}

// Attach flushes the held lines to dst and writes through to it from now on.
// Only the first call takes effect; it reports whether it did.
func (s *logSink) Attach(dst io.Writer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dst != nil {
		return false
	}
	_, _ = dst.Write(s.held.Bytes())
	s.held.Reset()
	s.dst = dst
	return true
}

// Attached reports whether a destination is set.
func (s *logSink) Attached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dst != nil
}
