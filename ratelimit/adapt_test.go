package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/internal/testing/redistest"
)

// TestAdaptiveSteps walks the learned rate through its rules with the
// time as an argument.
func TestAdaptiveSteps(t *testing.T) {
	const rate = 10.0
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		why      string
		at       time.Duration
		throttle bool
		eff      float64
		dir      string
	}
	steps := []step{
		{why: "a new key runs at the configured rate", at: 0, eff: 10},
		{why: "a 429 halves it (no rate observed: from the rate in force); the ceiling is a tenth below it", at: 0, throttle: true, eff: 5, dir: DirectionDown},
		{why: "429s of calls sent before the slowdown do not slow again", at: 500 * time.Millisecond, throttle: true, eff: 5},
		{why: "no step before adaptRecoverEvery", at: adaptRecoverEvery - time.Millisecond, eff: 5},
		{why: "one step (a tenth of the ceiling, 9) after it", at: adaptRecoverEvery, eff: 5.9, dir: DirectionUp},
		{why: "two more after twice as long", at: 3 * adaptRecoverEvery, eff: 7.7, dir: DirectionUp},
		{why: "up to the ceiling, a tenth below the rate that drew the 429", at: 10 * adaptRecoverEvery, eff: 9, dir: DirectionUp},
		{why: "and no further", at: 20 * adaptRecoverEvery, eff: 9},
		{why: "the ceiling rises a tenth after adaptCeilingEvery without a 429", at: adaptCeilingEvery, eff: 9.9, dir: DirectionUp},
		{why: "a 429 after the hold halves again", at: adaptCeilingEvery + 10*time.Second, throttle: true, eff: 4.95, dir: DirectionDown},
		{why: "a 429 after the hold and one step up (5.841) halves that; the ceiling goes a tenth below 5.841", at: adaptCeilingEvery + 12*time.Second, throttle: true, eff: 2.9205, dir: DirectionDown},
		{why: "recovery stops at that ceiling", at: adaptCeilingEvery + 30*time.Second, eff: 5.2569, dir: DirectionUp},
	}
	var a adaptive
	for _, s := range steps {
		var eff float64
		var dir string
		if s.throttle {
			eff, dir = a.throttle(rate, at(s.at))
		} else {
			eff, dir = a.at(rate, at(s.at))
		}
		assert.InDelta(t, s.eff, eff, 1e-9, s.why)
		assert.Equal(t, s.dir, dir, s.why)
	}

	t.Run("never below the floor", func(t *testing.T) {
		for _, c := range []struct{ rate, floor float64 }{
			{10, 10.0 / adaptFloorDiv}, // the configured rate / 32 when below 1 call a second
			{10000, adaptFloorRPS},     // else 1 call a second: any limit above it is reachable
		} {
			var a adaptive
			var eff float64
			for i := range 40 {
				eff, _ = a.throttle(c.rate, at(time.Duration(i)*adaptHold))
			}
			assert.InDelta(t, c.floor, eff, 1e-9, "configured %v", c.rate)
		}
	})
	t.Run("a 429 halves the rate observed, when lower than the rate in force", func(t *testing.T) {
		var a adaptive
		a.at(10000, t0)
		for i := range 9 { // 4 calls a second, far below the rate in force
			a.seen.granted(at(time.Duration(i) * 250 * time.Millisecond))
		}
		eff, dir := a.throttle(10000, at(2*time.Second))
		assert.Equal(t, DirectionDown, dir)
		assert.InDelta(t, 2, eff, 1e-9, "half of 4")
		assert.InDelta(t, 3.6, a.ceil, 1e-9, "a tenth below 4")
	})
	t.Run("too few calls, or a quiet spell, are no observed rate", func(t *testing.T) {
		var o observed
		o.granted(t0)
		o.granted(at(100 * time.Millisecond))
		o.granted(at(200 * time.Millisecond))
		assert.Zero(t, o.rate(), "two gaps")
		o.granted(at(time.Hour))
		assert.Zero(t, o.rate(), "a gap of an hour is not counted")
		o.granted(at(time.Hour + 100*time.Millisecond))
		assert.InDelta(t, 10, o.rate(), 1e-9)
	})
	t.Run("a new configured rate starts afresh", func(t *testing.T) {
		var a adaptive
		a.throttle(rate, t0)
		eff, dir := a.at(20, at(time.Millisecond))
		assert.InDelta(t, 20, eff, 1e-9)
		assert.Empty(t, dir)
		assert.True(t, a.rest())
	})
}

// throttleTests run against every Budget implementation: b and other
// share their state (the same Budget, or two replicas on one Redis).
func throttleTests(t *testing.T, newBudgets func(t *testing.T, opts Options) (b, other Budget)) {
	l := Limit{Rate: 100, Burst: 1}
	const key = "/api/v1/reports/latest"
	ctx := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("a 429 halves the rate once, then it recovers", func(t *testing.T) {
		m := newMetrics(t)
		core, logs := observer.New(zapcore.InfoLevel)
		b, other := newBudgets(t, Options{Network: "mainnet", Metrics: m, Logger: zap.New(core)})
		require.NoError(t, b.Wait(ctx(t), key, l))
		eff := func() float64 { return testutil.ToFloat64(m.budgetEff.WithLabelValues("mainnet", key)) }
		assert.EqualValues(t, 100, eff(), "the configured rate is in force")
		assert.EqualValues(t, 100, testutil.ToFloat64(m.budgetRPS.WithLabelValues("mainnet", key)))

		b.Throttled(key, l)
		other.Throttled(key, l) // the same burst of 429s, seen by another caller
		require.NoError(t, other.Wait(ctx(t), key, l))
		assert.EqualValues(t, 50, eff(), "halved once")
		down := m.budgetAdjusts.WithLabelValues("mainnet", key, DirectionDown)
		assert.EqualValues(t, 1, testutil.ToFloat64(down))
		assert.Equal(t, 1, logs.FilterMessageSnippet("slowed after an upstream 429").Len(), "one log line per change")

		// While no 429 comes back, it climbs step by step.
		require.Eventually(t, func() bool {
			if err := b.Wait(ctx(t), key, l); err != nil {
				t.Error(err)
				return true
			}
			return eff() > 50
		}, 20*time.Second, 50*time.Millisecond)
		up := testutil.ToFloat64(m.budgetAdjusts.WithLabelValues("mainnet", key, DirectionUp))
		assert.GreaterOrEqual(t, up, 1.0)
		assert.Equal(t, int(up), logs.FilterMessageSnippet("recovering").Len(), "one log line per step")
		assert.LessOrEqual(t, eff(), 90.0, "no higher than a step below the rate that drew the 429")
		assert.EqualValues(t, 1, testutil.ToFloat64(down), "no 429 since")
	})

	t.Run("keys learn apart", func(t *testing.T) {
		m := newMetrics(t)
		b, _ := newBudgets(t, Options{Network: "mainnet", Metrics: m})
		b.Throttled(key, l)
		require.NoError(t, b.Wait(ctx(t), "/api/v1/reports/bulk", l))
		assert.EqualValues(t, 100, testutil.ToFloat64(m.budgetEff.WithLabelValues("mainnet", "/api/v1/reports/bulk")))
	})

	t.Run("an unlimited budget learns nothing", func(t *testing.T) {
		m := newMetrics(t)
		b, _ := newBudgets(t, Options{Network: "mainnet", Metrics: m})
		b.Throttled(key, Limit{})
		require.NoError(t, b.Wait(ctx(t), key, Limit{}))
		assert.EqualValues(t, 0, testutil.ToFloat64(m.budgetAdjusts.WithLabelValues("mainnet", key, DirectionDown)))
	})
}

func TestMemoryBudgetThrottled(t *testing.T) {
	throttleTests(t, func(t *testing.T, opts Options) (Budget, Budget) {
		b, err := NewMemoryBudget(opts)
		require.NoError(t, err)
		return b, b
	})
}

func TestRedisBudgetThrottled(t *testing.T) {
	url := redistest.Start(t)
	n := 0
	throttleTests(t, func(t *testing.T, opts Options) (Budget, Budget) {
		n++ // each subtest its own prefix, hence its own keys
		opts.Prefix = "throttle" + strconv.Itoa(n) + ":"
		a, err := NewRedisBudget(newClient(t, url), opts)
		require.NoError(t, err)
		// The second replica records into the same metrics, so that the
		// test sees the rate it reads from Redis; it logs nothing.
		otherOpts := opts
		otherOpts.Logger = nil
		b, err := NewRedisBudget(newClient(t, url), otherOpts)
		require.NoError(t, err)
		return a, b
	})
}

// TestBudgetSpacing: with burst 1 and a margin, callers that hammer a key
// are granted no more calls than one per interval; the interval is the
// rate in force's, so a throttled key grants fewer.
func TestBudgetSpacing(t *testing.T) {
	url := redistest.Start(t)
	l := Limit{Rate: 50, Burst: 10} // burst 10: the GCRA still spaces calls 1/rate + margin apart after the burst
	const margin = 5 * time.Millisecond
	for _, impl := range []string{"memory", "redis"} {
		t.Run(impl, func(t *testing.T) {
			var b Budget
			var err error
			opts := Options{Network: "n", BudgetMargin: margin, Prefix: "spacing:" + impl + ":"}
			if impl == "memory" {
				b, err = NewMemoryBudget(opts)
			} else {
				b, err = NewRedisBudget(newClient(t, url), opts)
			}
			require.NoError(t, err)
			var errs atomic.Int64
			admitted, elapsed := hammer(1, 4, time.Second, 5000, func(int) bool {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				err := b.Wait(ctx, "/k", l)
				if err != nil && !isBudgetError(err) {
					errs.Add(1)
				}
				return err == nil
			})
			iv := interval(l.Rate, margin)
			most := float64(l.Burst) + float64(elapsed+200*time.Millisecond)/float64(iv) + 1
			t.Logf("%s: %d calls in %v (at most %.1f at %v apart)", impl, admitted, elapsed, most, iv)
			require.Zero(t, errs.Load())
			assert.Greater(t, admitted, int64(l.Burst))
			assert.LessOrEqual(t, float64(admitted), most)
		})
	}
}
