package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/internal/testing/redistest"
)

// newClient returns a client of the Redis at url that gives up at once
// when Redis is gone (no retries), as a gateway should be configured.
func newClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	opt.MaxRetries = -1
	opt.DialTimeout = time.Second
	opt.ReadTimeout = time.Second
	opt.WriteTimeout = time.Second
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return m
}

// hammer runs goroutines calls of try per replica until dur has passed or
// each has made maxCalls, and returns how many returned true and how long
// the run took.
func hammer(replicas, goroutines int, dur time.Duration, maxCalls int, try func(replica int) bool) (admitted int64, elapsed time.Duration) {
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for r := range replicas {
		for range goroutines {
			wg.Go(func() {
				for i := 0; i < maxCalls && time.Since(start) < dur; i++ {
					if try(r) {
						n.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return n.Load(), time.Since(start)
}

func TestRedisAllow(t *testing.T) {
	srv := redistest.New(t)
	c := newClient(t, srv.URL())
	m := newMetrics(t)
	r, err := NewRedis(c, Options{Name: "team", Metrics: m})
	require.NoError(t, err)
	ctx := context.Background()
	l := Limit{Rate: 0.001, Burst: 3} // a token every 1000s: only the burst

	for want := 2; want >= 0; want-- {
		d, err := r.Allow(ctx, "trading", l)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, want, d.Remaining)
		assert.Zero(t, d.RetryAfter)
		assert.Equal(t, l, d.Limit)
	}
	d, err := r.Allow(ctx, "trading", l)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 0, d.Remaining)
	assert.Greater(t, d.RetryAfter, 990*time.Second)
	assert.LessOrEqual(t, d.RetryAfter, 1000*time.Second)
	assert.Greater(t, d.Reset, 2990*time.Second)

	d, err = r.Allow(ctx, "research", l)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "keys are isolated")

	d, err = r.Allow(ctx, "trading", Limit{Burst: 3})
	require.NoError(t, err)
	assert.True(t, d.Allowed, "unlimited")
	_, err = r.Allow(ctx, "trading", Limit{Rate: 1})
	assert.ErrorIs(t, err, ErrInvalidLimit)

	// The key in Redis is exactly Prefix + "rate:" + key.
	n, err := c.Exists(ctx, "streamgate:rl:rate:trading").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)

	assert.EqualValues(t, 5, testutil.ToFloat64(m.decisions.WithLabelValues("team", ResultAllowed)))
	assert.EqualValues(t, 1, testutil.ToFloat64(m.decisions.WithLabelValues("team", ResultRefused)))
	assert.EqualValues(t, 1, testutil.ToFloat64(m.decisions.WithLabelValues("team", ResultError)))
}

func TestRedisPrefixAndRates(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	r, err := NewRedis(c, Options{Prefix: "other:"})
	require.NoError(t, err)
	ctx := context.Background()
	cases := []struct {
		l     Limit
		retry time.Duration // RetryAfter of the event after the burst, about
	}{
		{Limit{Rate: 10, Burst: 2}, 100 * time.Millisecond},
		{Limit{Rate: 0.5, Burst: 1}, 2 * time.Second},
		{Limit{Rate: 2.5, Burst: 1}, 400 * time.Millisecond},
	}
	for i, tc := range cases {
		key := "k" + strconv.Itoa(i)
		for range tc.l.Burst {
			d, err := r.Allow(ctx, key, tc.l)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		d, err := r.Allow(ctx, key, tc.l)
		require.NoError(t, err)
		require.False(t, d.Allowed, "%+v", tc.l)
		assert.Greater(t, d.RetryAfter, tc.retry*8/10, "%+v", tc.l)
		assert.LessOrEqual(t, d.RetryAfter, tc.retry, "%+v", tc.l)
		n, err := c.Exists(ctx, "other:rate:"+key).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
	}
}

func TestRedisSharedByReplicas(t *testing.T) {
	url := redistest.Start(t)
	var limiters []*Redis
	for range 3 {
		r, err := NewRedis(newClient(t, url), Options{})
		require.NoError(t, err)
		limiters = append(limiters, r)
	}
	l := Limit{Rate: 1, Burst: 100}
	var errs atomic.Int64
	admitted, elapsed := hammer(3, 4, time.Second, 5000, func(i int) bool {
		d, err := limiters[i].Allow(context.Background(), "shared", l)
		if err != nil {
			errs.Add(1)
		}
		return d.Allowed
	})
	expected := float64(l.Burst) + l.Rate*elapsed.Seconds()
	t.Logf("three replicas admitted %d in %v (burst %d + rate x elapsed = %.1f)", admitted, elapsed, l.Burst, expected)
	require.Zero(t, errs.Load())
	assert.GreaterOrEqual(t, admitted, int64(l.Burst))
	assert.LessOrEqual(t, float64(admitted), expected+1)
	assert.InEpsilon(t, expected, float64(admitted), 0.05)
}

// failTest is a Redis server and a clock for the fail-mode tests.
type failTest struct {
	srv    *redistest.Server
	client *redis.Client
	clock  *fakeClock
	m      *Metrics
	logs   *observer.ObservedLogs
	opts   Options
}

func newFailTest(t *testing.T, mode FailMode) *failTest {
	srv := redistest.New(t)
	core, logs := observer.New(zapcore.InfoLevel)
	ft := &failTest{srv: srv, client: newClient(t, srv.URL()), clock: newFakeClock(t0), m: newMetrics(t), logs: logs}
	ft.opts = Options{Name: "team", Network: "mainnet", FailMode: mode, RetryInterval: time.Minute,
		Now: ft.clock.Now, Metrics: ft.m, Logger: zap.New(core)}
	return ft
}

func (ft *failTest) exists(t *testing.T, key string) bool {
	t.Helper()
	n, err := ft.client.Exists(context.Background(), key).Result()
	require.NoError(t, err)
	return n == 1
}

func (ft *failTest) fallbacks(mode FailMode) float64 {
	return testutil.ToFloat64(ft.m.fallbacks.WithLabelValues(mode.String()))
}

func (ft *failTest) redisErrors(op string) float64 {
	return testutil.ToFloat64(ft.m.redisErrors.WithLabelValues(op))
}

// recover restarts Redis and moves the clock on until a call of use reaches
// it, which probe reports; it allows a few probes, since the first may meet
// a connection that the old server closed.
func (ft *failTest) recover(t *testing.T, use func(), probe func() bool) {
	t.Helper()
	ft.srv.Restart()
	use()
	require.False(t, probe(), "Redis was tried before RetryInterval had passed")
	for range 5 {
		ft.clock.Advance(ft.opts.RetryInterval)
		use()
		if probe() {
			break
		}
	}
	require.True(t, probe(), "never went back to Redis")
	assert.Equal(t, 1, ft.logs.FilterMessage("redis available again").Len())
}

func TestRedisFailOpen(t *testing.T) {
	ft := newFailTest(t, FailOpen)
	r, err := NewRedis(ft.client, ft.opts)
	require.NoError(t, err)
	ctx := context.Background()
	l := Limit{Rate: 0.001, Burst: 3}

	d, err := r.Allow(ctx, "a", l)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.True(t, ft.exists(t, "streamgate:rl:rate:a"))

	ft.srv.Stop()
	var allowed int
	for range 5 {
		d, err := r.Allow(ctx, "a", l)
		require.NoError(t, err, "fail open decides locally")
		if d.Allowed {
			allowed++
		}
	}
	assert.Equal(t, 3, allowed, "the local bucket knows nothing of Redis: a full burst")
	assert.EqualValues(t, 5, ft.fallbacks(FailOpen))
	assert.EqualValues(t, 1, ft.redisErrors("allow"), "Redis is not tried again before RetryInterval")
	assert.Equal(t, 1, ft.logs.FilterMessage("redis unavailable; deciding with local limits").Len())

	ft.recover(t,
		func() { _, err := r.Allow(ctx, "b", l); require.NoError(t, err) },
		func() bool { return ft.exists(t, "streamgate:rl:rate:b") })
	before := ft.fallbacks(FailOpen)
	_, err = r.Allow(ctx, "b", l)
	require.NoError(t, err)
	assert.Equal(t, before, ft.fallbacks(FailOpen), "decided by Redis again")
	assert.Equal(t, 1, ft.logs.FilterMessage("redis unavailable; deciding with local limits").Len(), "one line per transition")
}

func TestRedisFailClosed(t *testing.T) {
	ft := newFailTest(t, FailClosed)
	r, err := NewRedis(ft.client, ft.opts)
	require.NoError(t, err)
	ctx := context.Background()
	l := Limit{Rate: 10, Burst: 3}

	ft.srv.Stop()
	for range 3 {
		d, err := r.Allow(ctx, "a", l)
		require.ErrorIs(t, err, ErrUnavailable)
		assert.False(t, d.Allowed)
		assert.Equal(t, time.Minute, d.RetryAfter)
	}
	assert.EqualValues(t, 3, ft.fallbacks(FailClosed))
	assert.EqualValues(t, 1, ft.redisErrors("allow"))
	assert.EqualValues(t, 3, testutil.ToFloat64(ft.m.decisions.WithLabelValues("team", ResultError)))
	assert.Equal(t, 1, ft.logs.FilterMessage("redis unavailable; refusing").Len())

	ft.recover(t,
		func() { _, _ = r.Allow(ctx, "b", l) },
		func() bool { return ft.exists(t, "streamgate:rl:rate:b") })
	d, err := r.Allow(ctx, "b", l)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

func TestRedisCancelledContext(t *testing.T) {
	ft := newFailTest(t, FailClosed)
	r, err := NewRedis(ft.client, ft.opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Allow(ctx, "a", Limit{Rate: 1, Burst: 1})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrUnavailable)
	assert.Zero(t, ft.redisErrors("allow"), "the caller's cancellation is not a Redis failure")
	assert.Zero(t, ft.fallbacks(FailClosed))
}

func TestRedisQuota(t *testing.T) {
	c := newClient(t, redistest.Start(t))
	q, err := NewRedisQuota(c, Options{})
	require.NoError(t, err)
	// Today, so that the counters' expiry lies in the future.
	today := time.Now().UTC().Truncate(24 * time.Hour)
	runQuotaSteps(t, q, quotaSteps(today))

	// Yesterday's counter is kept apart from today's.
	next := today.Add(24 * time.Hour)
	d, err := q.Take(context.Background(), "a", 3, next.Add(-time.Nanosecond))
	require.NoError(t, err)
	assert.False(t, d.Allowed)

	key := "streamgate:rl:quota:a:" + today.Format(time.DateOnly)
	ttl, err := c.TTL(context.Background(), key).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0))
	assert.LessOrEqual(t, ttl, time.Until(next.Add(quotaGrace))+time.Second) // Redis rounds TTL to seconds
}

func TestRedisQuotaUsed(t *testing.T) {
	url := redistest.Start(t)
	a, err := NewRedisQuota(newClient(t, url), Options{})
	require.NoError(t, err)
	b, err := NewRedisQuota(newClient(t, url), Options{})
	require.NoError(t, err)
	ctx, now := context.Background(), time.Now()
	for _, q := range []*RedisQuota{a, b, a} {
		_, err := q.Take(ctx, "daily:t", 10, now)
		require.NoError(t, err)
	}
	n, err := b.Used(ctx, "daily:t", now)
	require.NoError(t, err)
	assert.EqualValues(t, 3, n, "every replica's count")
	n, err = a.Used(ctx, "daily:none", now)
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestRedisQuotaSharedByReplicas(t *testing.T) {
	url := redistest.Start(t)
	var quotas []*RedisQuota
	for range 3 {
		q, err := NewRedisQuota(newClient(t, url), Options{})
		require.NoError(t, err)
		quotas = append(quotas, q)
	}
	now := time.Now()
	admitted, _ := hammer(3, 4, 5*time.Second, 40, func(i int) bool {
		d, err := quotas[i].Take(context.Background(), "shared", 100, now)
		return err == nil && d.Allowed
	})
	assert.EqualValues(t, 100, admitted, "480 attempts, exactly the quota admitted")
}

func TestRedisQuotaFailModes(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	t.Run("open", func(t *testing.T) {
		ft := newFailTest(t, FailOpen)
		q, err := NewRedisQuota(ft.client, ft.opts)
		require.NoError(t, err)
		ft.srv.Stop()
		var allowed int
		for range 4 {
			d, err := q.Take(ctx, "a", 2, now)
			require.NoError(t, err)
			if d.Allowed {
				allowed++
			}
		}
		assert.Equal(t, 2, allowed)
		assert.EqualValues(t, 4, ft.fallbacks(FailOpen))
		assert.EqualValues(t, 1, ft.redisErrors("quota"))
		day := now.UTC().Format(time.DateOnly)
		ft.recover(t,
			func() { _, err := q.Take(ctx, "b", 2, now); require.NoError(t, err) },
			func() bool { return ft.exists(t, "streamgate:rl:quota:b:"+day) })
	})
	t.Run("closed", func(t *testing.T) {
		ft := newFailTest(t, FailClosed)
		q, err := NewRedisQuota(ft.client, ft.opts)
		require.NoError(t, err)
		ft.srv.Stop()
		d, err := q.Take(ctx, "a", 2, now)
		require.ErrorIs(t, err, ErrUnavailable)
		assert.False(t, d.Allowed)
		assert.Positive(t, d.RetryAfter)
		assert.EqualValues(t, 1, ft.fallbacks(FailClosed))
	})
}

func TestRedisBudget(t *testing.T) {
	url := redistest.Start(t)
	n := 0
	budgetTests(t, func(t *testing.T) Budget {
		n++ // each subtest its own network, hence its own keys
		b, err := NewRedisBudget(newClient(t, url), Options{Network: "net" + strconv.Itoa(n)})
		require.NoError(t, err)
		return b
	})
}

func TestRedisBudgetSharedByReplicas(t *testing.T) {
	url := redistest.Start(t)
	var budgets []*RedisBudget
	for range 3 {
		b, err := NewRedisBudget(newClient(t, url), Options{Network: "mainnet"})
		require.NoError(t, err)
		budgets = append(budgets, b)
	}
	l := Limit{Rate: 1, Burst: 100}
	const patience = 200 * time.Millisecond
	var errs atomic.Int64
	admitted, elapsed := hammer(3, 4, time.Second, 5000, func(i int) bool {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		err := budgets[i].Wait(ctx, "/api/v1/reports", l)
		if err != nil && !isBudgetError(err) {
			t.Errorf("replica %d: %v", i, err)
			errs.Add(1)
		}
		return err == nil
	})
	// A waiter may be granted a token up to its patience after the run.
	expected := float64(l.Burst) + l.Rate*(elapsed+patience).Seconds()
	t.Logf("three replicas were granted %d upstream calls in %v (at most %.1f)", admitted, elapsed, expected)
	require.Zero(t, errs.Load())
	assert.GreaterOrEqual(t, admitted, int64(l.Burst))
	assert.LessOrEqual(t, float64(admitted), expected+1)
}

func isBudgetError(err error) bool {
	var be *BudgetError
	return errors.As(err, &be)
}

func TestRedisBudgetPauseIsShared(t *testing.T) {
	url := redistest.Start(t)
	a, err := NewRedisBudget(newClient(t, url), Options{Network: "mainnet"})
	require.NoError(t, err)
	b, err := NewRedisBudget(newClient(t, url), Options{Network: "mainnet"})
	require.NoError(t, err)
	l := Limit{Rate: 100, Burst: 10}

	a.Pause("/api/v1/reports", time.Hour) // replica a saw a 429
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = b.Wait(ctx, "/api/v1/reports", l)
	var be *BudgetError
	require.ErrorAs(t, err, &be, "replica b is paused too")
	assert.Greater(t, be.RetryAfter, 59*time.Minute)
	require.NoError(t, b.Wait(ctx, "/api/v1/reports/latest", l), "other endpoints go on")

	a.Pause("/api/v1/reports/page", 50*time.Millisecond)
	require.NoError(t, b.Wait(ctx, "/api/v1/reports/page", l), "a short pause is waited out")
}

func TestRedisBudgetFailModes(t *testing.T) {
	ctx := context.Background()
	withTimeout := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	l := Limit{Rate: 1.0 / 3600, Burst: 2}
	t.Run("open", func(t *testing.T) {
		ft := newFailTest(t, FailOpen)
		b, err := NewRedisBudget(ft.client, ft.opts)
		require.NoError(t, err)
		b.Pause("/paused", time.Hour)
		ft.srv.Stop()
		require.NoError(t, b.Wait(withTimeout(t), "/a", l))
		require.NoError(t, b.Wait(withTimeout(t), "/a", l))
		require.ErrorIs(t, b.Wait(withTimeout(t), "/a", l), ErrBudgetExhausted, "local limits")
		require.ErrorIs(t, b.Wait(withTimeout(t), "/paused", l), ErrBudgetExhausted, "pauses are kept locally too")
		assert.EqualValues(t, 4, ft.fallbacks(FailOpen))
		assert.EqualValues(t, 1, ft.redisErrors("budget"))

		ft.recover(t,
			func() { _ = b.Wait(withTimeout(t), "/b", l) },
			func() bool { return ft.exists(t, "streamgate:rl:budget:{mainnet:/b}") })
	})
	t.Run("closed", func(t *testing.T) {
		ft := newFailTest(t, FailClosed)
		b, err := NewRedisBudget(ft.client, ft.opts)
		require.NoError(t, err)
		ft.srv.Stop()
		require.ErrorIs(t, b.Wait(withTimeout(t), "/a", l), ErrUnavailable)
		b.Pause("/a", time.Second) // does not try Redis before RetryInterval
		assert.EqualValues(t, 1, ft.fallbacks(FailClosed))
		assert.EqualValues(t, 1, ft.redisErrors("budget"))
		assert.Zero(t, ft.redisErrors("pause"))
	})
}

func BenchmarkRedisAllow(b *testing.B) {
	r, err := NewRedis(newClient(b, redistest.Start(b)), Options{})
	require.NoError(b, err)
	l := Limit{Rate: 1e6, Burst: 1000}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.Allow(ctx, "team", l); err != nil {
			b.Fatal(err)
		}
	}
}
