package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/redisconn"
)

// newBreakerClient is a client of redisconn on srv whose breaker stays
// open once opened, with a hook counting the calls that reached Redis.
func newBreakerClient(t *testing.T, srv *redistest.Server) (*redisconn.Client, *redistest.ReachHook) {
	t.Helper()
	c, err := redisconn.NewURL(srv.URL(), "", redisconn.Options{CommandTimeout: 50 * time.Millisecond, BreakerOpen: time.Hour})
	require.NoError(t, err)
	reach := &redistest.ReachHook{}
	c.AddHook(reach)
	t.Cleanup(func() { _ = c.Close() })
	return c, reach
}

// The limits fall back as their fail mode says as soon as the breaker is
// open: every Redis implementation shares one client, hence one breaker,
// and the calls that wait are those that opened it.
func TestRedisClientBreakerFailModes(t *testing.T) {
	srv := redistest.New(t)
	ctx := context.Background()
	l := Limit{Rate: 0.001, Burst: 5}
	// RetryInterval of a nanosecond: the limits would try Redis at every
	// call; only the breaker keeps them from waiting.
	const retry = time.Nanosecond

	open, openReach := newBreakerClient(t, srv)
	limiter, err := NewRedis(open.UniversalClient, Options{Name: "team", RetryInterval: retry})
	require.NoError(t, err)
	quota, err := NewRedisQuota(open.UniversalClient, Options{Name: "daily", RetryInterval: retry})
	require.NoError(t, err)
	budget, err := NewRedisBudget(open.UniversalClient, Options{RetryInterval: retry})
	require.NoError(t, err)

	closed, closedReach := newBreakerClient(t, srv)
	strict, err := NewRedis(closed.UniversalClient, Options{Name: "team", FailMode: FailClosed, RetryInterval: retry})
	require.NoError(t, err)

	for _, r := range []*Redis{limiter, strict} {
		d, err := r.Allow(ctx, "warm", l)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	base, strictBase := openReach.Reached.Load(), closedReach.Reached.Load()

	srv.Pause()
	const calls = 200
	allowed, refused := 0, 0
	for range calls {
		d, err := limiter.Allow(ctx, "trading", l)
		require.NoError(t, err, "fail open decides locally")
		if d.Allowed {
			allowed++
		} else {
			refused++
		}
	}
	assert.Equal(t, l.Burst, allowed, "the local limit applies")
	assert.Equal(t, calls-l.Burst, refused)
	now := time.Now()
	taken := 0
	for range calls {
		d, err := quota.Take(ctx, "trading", 7, now)
		require.NoError(t, err)
		if d.Allowed {
			taken++
		}
	}
	assert.Equal(t, 7, taken, "the local quota applies")
	for range 20 {
		require.NoError(t, budget.Wait(ctx, "endpoint", Limit{Rate: 1000, Burst: 1000}))
	}
	budget.Pause("endpoint", time.Millisecond)
	assert.EqualValues(t, redisconn.DefaultBreakerFailures, openReach.Reached.Load()-base, "calls that reached the hanging Redis")
	assert.EqualValues(t, redisconn.DefaultBreakerFailures, openReach.Failed.Load())

	unavailable := 0
	for range calls {
		d, err := strict.Allow(ctx, "trading", l)
		require.ErrorIs(t, err, ErrUnavailable, "fail closed refuses")
		assert.False(t, d.Allowed)
		if errors.Is(err, redisconn.ErrCircuitOpen) {
			unavailable++
		}
	}
	assert.Equal(t, calls-redisconn.DefaultBreakerFailures, unavailable, "refused without waiting")
	assert.EqualValues(t, redisconn.DefaultBreakerFailures, closedReach.Reached.Load()-strictBase, "calls that reached the hanging Redis")
}
