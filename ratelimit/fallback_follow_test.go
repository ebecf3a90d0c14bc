package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/redisconn"
)

// One call that failed (a timeout on a busy machine) does not make the
// limits decide alone for a whole RetryInterval while the Redis client's
// own breaker stays closed: the next request goes to Redis again. A client
// without a breaker of its own (a plain go-redis client) keeps the
// interval.
func TestFallbackFollowsTheClientsBreaker(t *testing.T) {
	srv := redistest.New(t)
	ctx := context.Background()
	c, err := redisconn.NewURL(srv.URL(), "", redisconn.Options{CommandTimeout: 50 * time.Millisecond, BreakerFailures: 3, BreakerOpen: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	l := Limit{Rate: 0.001, Burst: 1}
	m := newMetrics(t)
	followed, err := NewRedis(c, Options{Name: "team", RetryInterval: time.Hour, Metrics: m})
	require.NoError(t, err)
	mp := newMetrics(t)
	plain, err := NewRedis(c.UniversalClient, Options{Name: "team", RetryInterval: time.Hour, Metrics: mp})
	require.NoError(t, err)
	fallbacks := func(m *Metrics) float64 { return testutil.ToFloat64(m.fallbacks.WithLabelValues(FailOpen.String())) }

	for i, r := range []*Redis{followed, plain} {
		d, err := r.Allow(ctx, fmt.Sprint("warm", i), l)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}

	// One failed call each: Redis hangs, the call times out, the request
	// is decided locally.
	srv.Pause()
	for i, r := range []*Redis{followed, plain} {
		_, err := r.Allow(ctx, fmt.Sprint("k", i), l)
		require.NoError(t, err)
	}
	require.Equal(t, 1.0, fallbacks(m))
	require.Equal(t, 1.0, fallbacks(mp))
	srv.Resume()
	require.NoError(t, c.Ping(ctx).Err(), "Redis answers again")
	select {
	case <-c.Ready():
	default:
		t.Fatal("two failed calls opened the breaker (it needs 3)")
	}

	// Redis answers: the followed limiter asks it at once, the plain one
	// still decides alone until its RetryInterval has passed.
	d, err := followed.Allow(ctx, "k2", l)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 1.0, fallbacks(m), "decided by Redis again")
	n, err := c.Exists(ctx, "streamgate:rl:rate:k2").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the token was taken in Redis")

	_, err = plain.Allow(ctx, "k3", l)
	require.NoError(t, err)
	assert.Equal(t, 2.0, fallbacks(mp), "without the client's breaker the interval holds")
}
