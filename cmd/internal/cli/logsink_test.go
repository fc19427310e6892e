package cli

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLogSinkHoldsThenFlushes(t *testing.T) {
	s := &logSink{}
	_, _ = s.Write([]byte("early\n"))
	var dst, other bytes.Buffer
	assert.True(t, s.Attach(&dst))
	assert.False(t, s.Attach(&other), "only the first destination counts")
	_, _ = s.Write([]byte("late\n"))
	assert.Equal(t, "early\nlate\n", dst.String())
	assert.Empty(t, other.String())
}

func TestLogSinkConcurrentWritesDuringAttach(t *testing.T) {
	s := &logSink{}
	var dst bytes.Buffer
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				_, _ = s.Write([]byte("x\n"))
			}
		}()
	}
	s.Attach(&dst)
	wg.Wait()
	assert.Equal(t, 400, bytes.Count(dst.Bytes(), []byte("x\n")), "no line lost across the switch")
}
