package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestDrainDelayWithinTheShutdown: realtime.drain_delay takes at most half
// of the shutdown's time, so that the listeners and the stream clients
// have the rest.
func TestDrainDelayWithinTheShutdown(t *testing.T) {
	assert.Equal(t, 5*time.Second, drainDelay(context.Background(), 5*time.Second), "no deadline: the whole delay")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	d := drainDelay(ctx, 5*time.Second)
	assert.LessOrEqual(t, d, 2*time.Second)
	assert.Positive(t, d)
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	assert.Equal(t, 5*time.Second, drainDelay(ctx2, 5*time.Second), "a long shutdown: the whole delay")
}
