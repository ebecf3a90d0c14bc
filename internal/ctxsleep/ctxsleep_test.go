package ctxsleep

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSleepWholeDuration(t *testing.T) {
	start := time.Now()
	assert.True(t, Sleep(context.Background(), 5*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond, "a whole sleep is never shorter than asked")
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	assert.False(t, <-done, "a sleep cut short by its context says so")
}

func TestSleepZero(t *testing.T) {
	assert.True(t, Sleep(context.Background(), 0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.False(t, Sleep(ctx, 0), "an ended context is reported even without waiting")
	assert.False(t, Sleep(ctx, time.Hour))
}
