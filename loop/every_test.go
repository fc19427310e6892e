package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestEvery(t *testing.T) {
	t.Run("first runs at once, a kick runs again, the end of ctx stops it", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var runs atomic.Int32
		kick := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Hour, kick, true, func() { runs.Add(1) })
		}()
		assert.Eventually(t, func() bool { return runs.Load() == 1 }, 10*time.Second, time.Millisecond)
		kick <- struct{}{}
		assert.Eventually(t, func() bool { return runs.Load() == 2 }, 10*time.Second, time.Millisecond)
		cancel()
		<-done
		assert.EqualValues(t, 2, runs.Load(), "no run after the end")
	})
	t.Run("without first, the ticker runs it", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := make(chan struct{}, 1)
		go Every(ctx, time.Millisecond, nil, false, func() {
			select {
			case ran <- struct{}{}:
			default:
			}
		})
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the ticker never ran it")
		}
	})
	t.Run("an ended ctx runs nothing but first", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var runs atomic.Int32
		Every(ctx, time.Millisecond, nil, false, func() { runs.Add(1) })
		assert.Zero(t, runs.Load())
	})
}
