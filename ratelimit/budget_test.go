package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/redisconn"
)

// budgetTests run against every Budget implementation. Durations are short
// and real; the tests assert outcomes, never how long anything took.
func budgetTests(t *testing.T, newBudget func(t *testing.T) Budget) {
	// asleep makes b signal on the returned channel whenever a waiter
	// has set its timer.
	asleep := func(b Budget) <-chan struct{} {
		c := make(chan struct{}, 16)
		signal := func() { c <- struct{}{} }
		switch b := b.(type) {
		case *MemoryBudget:
			b.asleep = signal
		case *RedisBudget:
			b.local.asleep = signal
		default:
			t.Fatalf("no sleep hook in %T", b)
		}
		return c
	}
	// holding makes b signal on the returned channel whenever a waiter
	// waits for the write of the call let go before it.
	holding := func(b Budget) <-chan struct{} {
		c := make(chan struct{}, 16)
		signal := func() { c <- struct{}{} }
		switch b := b.(type) {
		case *MemoryBudget:
			b.holding = signal
		case *RedisBudget:
			b.local.holding = signal
		default:
			t.Fatalf("no hold hook in %T", b)
		}
		return c
	}
	const key = "/api/v1/reports"
	ctx := context.Background()
	withTimeout := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("refuses at once when the deadline is too short", func(t *testing.T) {
		b := newBudget(t)
		l := Limit{Rate: 1.0 / 3600, Burst: 1} // the next token is an hour away
		require.NoError(t, b.Wait(withTimeout(5*time.Second), key, l))
		err := b.Wait(withTimeout(5*time.Second), key, l)
		var be *BudgetError
		require.ErrorAs(t, err, &be)
		assert.ErrorIs(t, err, ErrBudgetExhausted)
		assert.Greater(t, be.RetryAfter, 5*time.Second)
		assert.LessOrEqual(t, be.RetryAfter, time.Hour)
	})

	t.Run("waits when the deadline allows", func(t *testing.T) {
		b := newBudget(t)
		l := Limit{Rate: 50, Burst: 1} // tokens 20ms apart
		for i := range 3 {
			require.NoError(t, b.Wait(withTimeout(5*time.Second), key, l), "wait %d", i)
		}
	})

	t.Run("waits without a deadline", func(t *testing.T) {
		b := newBudget(t)
		l := Limit{Rate: 50, Burst: 1}
		for i := range 3 {
			require.NoError(t, b.Wait(ctx, key, l), "wait %d", i)
		}
	})

	t.Run("keys are separate", func(t *testing.T) {
		b := newBudget(t)
		l := Limit{Rate: 1.0 / 3600, Burst: 1}
		require.NoError(t, b.Wait(withTimeout(5*time.Second), "/a", l))
		require.NoError(t, b.Wait(withTimeout(5*time.Second), "/b", l))
		require.ErrorIs(t, b.Wait(withTimeout(5*time.Second), "/a", l), ErrBudgetExhausted)
	})

	t.Run("a long pause refuses", func(t *testing.T) {
		b := newBudget(t)
		b.Pause(key, time.Hour)
		err := b.Wait(withTimeout(5*time.Second), key, Limit{Rate: 100, Burst: 10})
		var be *BudgetError
		require.ErrorAs(t, err, &be)
		assert.Greater(t, be.RetryAfter, 5*time.Second)
		// A shorter pause does not shorten it.
		b.Pause(key, time.Millisecond)
		require.ErrorIs(t, b.Wait(withTimeout(5*time.Second), key, Limit{}), ErrBudgetExhausted)
		// Other keys go on.
		require.NoError(t, b.Wait(withTimeout(5*time.Second), "/other", Limit{Rate: 100, Burst: 10}))
	})

	t.Run("a short pause is waited out", func(t *testing.T) {
		b := newBudget(t)
		b.Pause(key, 30*time.Millisecond)
		require.NoError(t, b.Wait(withTimeout(5*time.Second), key, Limit{Rate: 100, Burst: 10}))
		b.Pause(key, 30*time.Millisecond)
		require.NoError(t, b.Wait(withTimeout(5*time.Second), key, Limit{}), "pauses hold unlimited budgets too")
	})

	t.Run("cancel unblocks a waiter", func(t *testing.T) {
		b := newBudget(t)
		sleeping := asleep(b)
		l := Limit{Rate: 1.0 / 3600, Burst: 1}
		require.NoError(t, b.Wait(ctx, key, l))
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- b.Wait(ctx, key, l) }() // no deadline: it would wait an hour
		select {
		case <-sleeping:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not start waiting")
		}
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return after its context was cancelled")
		}
	})

	t.Run("a waiter reserves its token; none beyond the horizon", func(t *testing.T) {
		b := newBudget(t)
		sleeping := asleep(b)
		l := Limit{Rate: 1 / (0.6 * budgetHorizon.Seconds()), Burst: 1} // tokens 0.6 horizons apart
		require.NoError(t, b.Wait(ctx, key, l))
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- b.Wait(ctx, key, l) }() // reserves the token 0.6 horizons away
		select {
		case <-sleeping:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not start waiting")
		}
		// The next token is 1.2 horizons away: refused at once, even
		// without a deadline.
		err := b.Wait(context.Background(), key, l)
		var be *BudgetError
		require.ErrorAs(t, err, &be)
		assert.Greater(t, be.RetryAfter, budgetHorizon)
		cancel() // the sleeper's reservation is spent
		assert.ErrorIs(t, <-done, context.Canceled)
		require.ErrorIs(t, b.Wait(withTimeout(5*time.Second), key, l), ErrBudgetExhausted, "a cancelled reservation is not given back")
	})

	t.Run("the next call goes the spacing after the write of the one before", func(t *testing.T) {
		b := newBudget(t)
		held := holding(b)
		l := Limit{Rate: 50, Burst: 1} // tokens 20 ms apart
		sent, err := b.Depart(withTimeout(10*time.Second), key, l)
		require.NoError(t, err)
		done := make(chan time.Time, 1)
		go func() {
			next, err := b.Depart(withTimeout(10*time.Second), key, l)
			if err != nil {
				t.Error(err)
				close(done)
				return
			}
			done <- time.Now()
			next(time.Time{})
		}()
		// The first call is let go but not written yet (a busy machine,
		// a new connection): the second waits for its write, well past
		// its own token.
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("the second call did not wait for the write of the first")
		}
		written := time.Now()
		sent(written)
		sent(written.Add(time.Hour)) // only the first report counts
		went := <-done
		require.False(t, went.IsZero())
		assert.False(t, went.Before(written.Add(interval(l.Rate, 0))), "the second call went %v after the first was written", went.Sub(written))
	})

	t.Run("a deadline ends the wait for a write", func(t *testing.T) {
		b := newBudget(t)
		held := holding(b)
		l := Limit{Rate: 50, Burst: 1}
		sent, err := b.Depart(withTimeout(10*time.Second), key, l)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.Wait(ctx, key, l) }()
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("the second call did not wait for the write of the first")
		}
		err = <-done // the first call is never written before the deadline
		var be *BudgetError
		require.ErrorAs(t, err, &be)
		sent(time.Time{}) // it failed: the calls after it go on
		require.NoError(t, b.Wait(withTimeout(10*time.Second), key, l))
	})

	t.Run("a call that stepped out while connecting rejoins the spacing before its write", func(t *testing.T) {
		b := newBudget(t)
		held := holding(b)
		l := Limit{Rate: 50, Burst: 1} // tokens 20 ms apart
		waitHeld := func(what string) {
			t.Helper()
			select {
			case <-held:
			case <-time.After(10 * time.Second):
				t.Fatal(what)
			}
		}
		slow, err := b.Depart(withTimeout(10*time.Second), key, l)
		require.NoError(t, err)
		// Its connection outlasts the interval: it steps out, and the
		// next call goes without waiting for it.
		slow(time.Time{})
		next, err := b.Depart(withTimeout(10*time.Second), key, l)
		require.NoError(t, err)
		// The slow call's connection comes while the next one holds the
		// key: it rejoins after that one's write.
		rejoined := make(chan Sent, 1)
		var rejoinedAt time.Time
		go func() {
			s := b.Rejoin(key, l)
			rejoinedAt = time.Now()
			rejoined <- s
		}()
		waitHeld("the rejoining call did not wait for the write of the call holding the key")
		written := time.Now()
		next(written)
		again := <-rejoined
		assert.False(t, rejoinedAt.Before(written.Add(interval(l.Rate, 0))), "the rejoining call went %v after the write before it", rejoinedAt.Sub(written))
		// Until its write, it holds the key as any call let go.
		done := make(chan time.Time, 1)
		go func() {
			s, err := b.Depart(withTimeout(10*time.Second), key, l)
			if err != nil {
				t.Error(err)
				close(done)
				return
			}
			done <- time.Now()
			s(time.Time{})
		}()
		waitHeld("the call after the rejoined one did not wait for its write")
		written = time.Now()
		again(written)
		went := <-done
		require.False(t, went.IsZero())
		assert.False(t, went.Before(written.Add(interval(l.Rate, 0))), "the call after the rejoined one went %v after its write", went.Sub(written))
		assert.NotNil(t, b.Rejoin(key, Limit{}), "an unlimited key has nothing to rejoin")
	})

	t.Run("a done context is refused", func(t *testing.T) {
		b := newBudget(t)
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, b.Wait(ctx, key, Limit{Rate: 100, Burst: 10}), context.Canceled)
	})

	t.Run("invalid limit", func(t *testing.T) {
		b := newBudget(t)
		assert.ErrorIs(t, b.Wait(ctx, key, Limit{Rate: 1}), ErrInvalidLimit)
	})
}

func TestMemoryBudget(t *testing.T) {
	budgetTests(t, func(t *testing.T) Budget {
		b, err := NewMemoryBudget(Options{Network: "testnet"})
		require.NoError(t, err)
		return b
	})
}

func TestMemoryBudgetGivesBackRefusedTokens(t *testing.T) {
	b, err := NewMemoryBudget(Options{})
	require.NoError(t, err)
	l := Limit{Rate: 1.0 / 3600, Burst: 2}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	require.NoError(t, b.Wait(ctx, "k", l))
	require.NoError(t, b.Wait(ctx, "k", l))
	for range 5 { // a refusal takes nothing...
		require.ErrorIs(t, b.Wait(ctx, "k", l), ErrBudgetExhausted)
	}
	// ...so the schedule owes nothing beyond the two tokens taken: the
	// next token is one interval away, not six.
	s := b.keys.shard("k")
	s.mu.Lock()
	e, _ := s.get("k", time.Now())
	next := e.tat.Add(-time.Duration(l.Burst-1) * interval(l.Rate, 0))
	s.mu.Unlock()
	assert.WithinDuration(t, time.Now().Add(time.Hour), next, time.Minute)
}

func TestMemoryBudgetMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	b, err := NewMemoryBudget(Options{Network: "mainnet", Metrics: m})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fast := Limit{Rate: 100, Burst: 1}
	require.NoError(t, b.Wait(ctx, "/api/v1/reports", fast)) // a token is there
	require.NoError(t, b.Wait(ctx, "/api/v1/reports", fast)) // waits ~10ms
	b.Pause("/api/v1/reports/bulk", time.Hour)
	require.Error(t, b.Wait(ctx, "/api/v1/reports/bulk", fast))

	assert.EqualValues(t, 1, testutil.ToFloat64(m.budgetWaits.WithLabelValues("mainnet", "/api/v1/reports")))
	assert.EqualValues(t, 0, testutil.ToFloat64(m.budgetRefusals.WithLabelValues("mainnet", "/api/v1/reports")))
	assert.EqualValues(t, 1, testutil.ToFloat64(m.budgetRefusals.WithLabelValues("mainnet", "/api/v1/reports/bulk")))
	assert.EqualValues(t, 2, histogramCount(t, reg, "streamgate_upstream_budget_wait_seconds"), "granted waits are observed")
}

// histogramCount returns the sample count of the one histogram series name.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRedisBudgetOneRoundTripPerCall: waiters that queue for the Redis
// budget cost one round trip to Redis each, whatever they wait: the script
// reserves each its token, and it sleeps locally until then. Before, a
// waiter asked again after every sleep, and a queue of them cost several
// round trips per upstream call.
func TestRedisBudgetOneRoundTripPerCall(t *testing.T) {
	srv := redistest.New(t)
	reg := prometheus.NewRegistry()
	rm, err := redisconn.NewMetrics(reg)
	require.NoError(t, err)
	c, err := redisconn.NewURL(srv.URL(), "", redisconn.Options{Name: "ratelimit", Metrics: rm})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	b, err := NewRedisBudget(c, Options{Network: "mainnet", BudgetMargin: 5 * time.Millisecond})
	require.NoError(t, err)
	roundTrips := func() float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == redisconn.MetricRoundTrips {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	l := Limit{Rate: 50, Burst: 1} // tokens 25 ms apart
	const key = "/api/v1/reports/latest"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.Wait(ctx, key, l)) // loads the script
	before := roundTrips()

	const waiters = 20 // a queue of half a second
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Go(func() { errs <- b.Wait(ctx, key, l) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	trips := roundTrips() - before
	t.Logf("%d waiters: %v round trips to Redis", waiters, trips)
	assert.EqualValues(t, waiters, trips, "one round trip per granted call")
}

// TestBudgetPauseReachesASleepingWaiter: a waiter that has reserved its
// token and sleeps does not go before a pause set meanwhile ends (an
// upstream 429 seen by this process); memory and Redis budgets alike,
// without asking Redis again.
func TestBudgetPauseReachesASleepingWaiter(t *testing.T) {
	url := redistest.Start(t)
	for _, impl := range []string{"memory", "redis"} {
		t.Run(impl, func(t *testing.T) {
			var b Budget
			var local *MemoryBudget
			if impl == "memory" {
				mb, err := NewMemoryBudget(Options{Network: "n"})
				require.NoError(t, err)
				b, local = mb, mb
			} else {
				rb, err := NewRedisBudget(newClient(t, url), Options{Network: "n", Prefix: "sleeper:"})
				require.NoError(t, err)
				b, local = rb, rb.local
			}
			sleeping := make(chan struct{}, 4)
			local.asleep = func() { sleeping <- struct{}{} }
			l := Limit{Rate: 0.5, Burst: 1} // the second token 2 s after the first: time to set the pause
			const key = "/k"
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, b.Wait(ctx, key, l))
			done := make(chan time.Time, 1)
			go func() {
				if err := b.Wait(ctx, key, l); err != nil {
					t.Error(err)
				}
				done <- time.Now()
			}()
			select {
			case <-sleeping:
			case <-ctx.Done():
				t.Fatal("the waiter did not sleep")
			}
			const pause = 3 * time.Second
			end := time.Now().Add(pause) // no later than the pause's end
			b.Pause(key, pause)
			went := <-done
			assert.False(t, went.Before(end), "the waiter went %v before the pause's end", end.Sub(went))
		})
	}
}
