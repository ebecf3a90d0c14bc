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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

// step is one event of a step table: at t0+at, key asks under limit.
type step struct {
	at        time.Duration
	key       string
	limit     Limit
	allowed   bool
	remaining int
	retry     time.Duration // expected RetryAfter, to the microsecond
	reset     time.Duration // expected Reset, to the microsecond
}

func runSteps(t *testing.T, l Limiter, clock *fakeClock, steps []step) {
	t.Helper()
	for i, s := range steps {
		clock.Set(t0.Add(s.at))
		d, err := l.Allow(context.Background(), s.key, s.limit)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, s.allowed, d.Allowed, "step %d: allowed", i)
		assert.Equal(t, s.remaining, d.Remaining, "step %d: remaining", i)
		assert.InDelta(t, s.retry, d.RetryAfter, float64(time.Microsecond), "step %d: retry after %v", i, d.RetryAfter)
		assert.InDelta(t, s.reset, d.Reset, float64(time.Microsecond), "step %d: reset %v", i, d.Reset)
		assert.Equal(t, s.limit, d.Limit, "step %d: limit", i)
	}
}

func TestMemorySteps(t *testing.T) {
	r10b5 := Limit{Rate: 10, Burst: 5}
	ms := time.Millisecond
	cases := []struct {
		name  string
		steps []step
	}{
		{"burst then refill: rate 10, burst 5", []step{
			{0, "a", r10b5, true, 4, 0, 100 * ms},
			{0, "a", r10b5, true, 3, 0, 200 * ms},
			{0, "a", r10b5, true, 2, 0, 300 * ms},
			{0, "a", r10b5, true, 1, 0, 400 * ms},
			{0, "a", r10b5, true, 0, 0, 500 * ms},
			{0, "a", r10b5, false, 0, 100 * ms, 500 * ms},        // the 6th waits for one token
			{50 * ms, "a", r10b5, false, 0, 50 * ms, 450 * ms},   // half a token
			{100 * ms, "a", r10b5, true, 0, 0, 500 * ms},         // one token back
			{100 * ms, "a", r10b5, false, 0, 100 * ms, 500 * ms}, // and gone again
			{1100 * ms, "a", r10b5, true, 4, 0, 100 * ms},        // full again after 500ms, capped at burst
		}},
		{"keys are isolated", []step{
			{0, "a", Limit{Rate: 1, Burst: 1}, true, 0, 0, time.Second},
			{0, "a", Limit{Rate: 1, Burst: 1}, false, 0, time.Second, time.Second},
			{0, "b", Limit{Rate: 1, Burst: 1}, true, 0, 0, time.Second},
			{0, "b", Limit{Rate: 1, Burst: 1}, false, 0, time.Second, time.Second},
		}},
		// Time up to a change accrues under the old limit (capped at the
		// old burst); the new limit applies from the change on.
		{"a changed limit is adopted", []step{
			{0, "a", Limit{Rate: 1, Burst: 2}, true, 1, 0, time.Second},
			{0, "a", Limit{Rate: 1, Burst: 2}, true, 0, 0, 2 * time.Second},
			{0, "a", Limit{Rate: 1, Burst: 2}, false, 0, time.Second, 2 * time.Second},
			// faster rate: the missing token comes in 100ms
			{0, "a", Limit{Rate: 10, Burst: 2}, false, 0, 100 * ms, 200 * ms},
			// larger burst: the 2 tokens of the old bucket are kept...
			{10 * time.Second, "a", Limit{Rate: 10, Burst: 10}, true, 1, 0, 900 * ms},
			// ...and the bucket now fills to 10
			{11 * time.Second, "a", Limit{Rate: 10, Burst: 10}, true, 9, 0, 100 * ms},
			// smaller burst: tokens are capped to it
			{11 * time.Second, "a", Limit{Rate: 10, Burst: 3}, true, 2, 0, 100 * ms},
			// slower rate
			{11 * time.Second, "a", Limit{Rate: 0.5, Burst: 3}, true, 1, 0, 4 * time.Second},
		}},
		{"unlimited", []step{
			{0, "a", Limit{}, true, 0, 0, 0},
			{0, "a", Limit{Burst: 7}, true, 7, 0, 0},
		}},
		{"fractional rate", []step{
			{0, "a", Limit{Rate: 0.25, Burst: 1}, true, 0, 0, 4 * time.Second},
			{time.Second, "a", Limit{Rate: 0.25, Burst: 1}, false, 0, 3 * time.Second, 3 * time.Second},
			{4 * time.Second, "a", Limit{Rate: 0.25, Burst: 1}, true, 0, 0, 4 * time.Second},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock(t0)
			m, err := NewMemory(Options{Now: clock.Now})
			require.NoError(t, err)
			runSteps(t, m, clock, tc.steps)
		})
	}
}

func TestMemoryInvalidLimit(t *testing.T) {
	m, err := NewMemory(Options{})
	require.NoError(t, err)
	for _, l := range []Limit{{Rate: -1, Burst: 1}, {Rate: 1, Burst: 0}, {Rate: 1, Burst: -1}} {
		_, err := m.Allow(context.Background(), "a", l)
		assert.ErrorIs(t, err, ErrInvalidLimit, "%+v", l)
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{{MaxKeys: -1}, {RetryInterval: -time.Second}, {FailMode: 7}} {
		_, err := NewMemory(o)
		assert.Error(t, err, "%+v", o)
	}
	for s, want := range map[string]FailMode{"open": FailOpen, "closed": FailClosed} {
		got, err := ParseFailMode(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, s, got.String())
	}
	_, err := ParseFailMode("ajar")
	assert.Error(t, err)
}

func TestMemoryBounded(t *testing.T) {
	clock := newFakeClock(t0)
	m, err := NewMemory(Options{Now: clock.Now, MaxKeys: 64})
	require.NoError(t, err)
	l := Limit{Rate: 1, Burst: 3}
	for i := range 10_000 {
		_, err := m.Allow(context.Background(), "key-"+strconv.Itoa(i), l)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, m.keys.len(), 64)
	assert.Positive(t, m.keys.len())

	// A recently used, partly drained key survives a flood of idle keys.
	for range 2 {
		_, err = m.Allow(context.Background(), "hot", l)
		require.NoError(t, err)
	}
	clock.Advance(time.Hour) // every older key is full again, hence idle
	for i := range 1_000 {
		_, err := m.Allow(context.Background(), "other-"+strconv.Itoa(i), l)
		require.NoError(t, err)
		clock.Advance(time.Nanosecond)
	}
	assert.LessOrEqual(t, m.keys.len(), 64)
}

func TestMemoryEvictsIdleFirst(t *testing.T) {
	clock := newFakeClock(t0)
	m, err := NewMemory(Options{Now: clock.Now, MaxKeys: 1600}) // 100 per shard
	require.NoError(t, err)
	l := Limit{Rate: 1, Burst: 1}
	for i := range 1000 {
		_, err := m.Allow(context.Background(), "key-"+strconv.Itoa(i), l)
		require.NoError(t, err)
	}
	require.Equal(t, 1000, m.keys.len())
	clock.Advance(time.Minute) // all full again: each new key drops one idle key
	for i := range 1000 {
		_, err := m.Allow(context.Background(), "new-"+strconv.Itoa(i), l)
		require.NoError(t, err)
	}
	// Without dropping idle keys there would be 2000; a shard keeps more
	// than its old count only when it got more new keys than old ones.
	assert.Less(t, m.keys.len(), 2000)
}

func TestMemoryConcurrent(t *testing.T) {
	clock := newFakeClock(t0) // time stands still: exactly the burst is admitted
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	require.NoError(t, err)
	m, err := NewMemory(Options{Now: clock.Now, Name: "team", Metrics: metrics})
	require.NoError(t, err)
	l := Limit{Rate: 10, Burst: 50}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 100 {
				d, err := m.Allow(context.Background(), "shared", l)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
				_, _ = m.Allow(context.Background(), "own-"+strconv.Itoa(g), l)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 50, admitted.Load())
	assert.EqualValues(t, 50+8*50, testutil.ToFloat64(metrics.decisions.WithLabelValues("team", ResultAllowed)))
	assert.EqualValues(t, 750+8*50, testutil.ToFloat64(metrics.decisions.WithLabelValues("team", ResultRefused)))
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := NewMetrics(reg)
	require.NoError(t, err)
	_, err = NewMetrics(reg)
	assert.Error(t, err, "a second registration must fail, not panic")

	var nilMetrics *Metrics // records nothing, and does not panic
	nilMetrics.decisionCounters("x").record(Decision{Allowed: true}, nil)
	nilMetrics.redisError("allow")
	nilMetrics.fallback(FailOpen)
	nilMetrics.budgetGranted("n", "e", time.Second)
	nilMetrics.budgetRefused("n", "e")
	assert.True(t, errors.Is(&BudgetError{}, ErrBudgetExhausted))
}

func BenchmarkMemoryAllow(b *testing.B) {
	m, err := NewMemory(Options{})
	require.NoError(b, err)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "team-" + strconv.Itoa(i)
	}
	l := Limit{Rate: 1e6, Burst: 1000}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := m.Allow(ctx, keys[i%len(keys)], l); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
