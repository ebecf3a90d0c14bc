package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
)

// TestRedisBudgetDistrustsItsState: the rate in force and the times a
// hostile writer leaves in Redis beside a budget key are clamped or reset
// by the script, never obeyed, and the state always expires. Before the
// script checked them, a rate written as 1e9 was the rate in force, one
// <= 0 or not a number broke the script (each replica fell back to a
// budget of its own), and a hash written without an expiry kept for ever.
func TestRedisBudgetDistrustsItsState(t *testing.T) {
	url := redistest.Start(t)
	rc := newClient(t, url)
	b, err := NewRedisBudget(newClient(t, url), Options{Network: "mainnet", Prefix: "hostile:"})
	require.NoError(t, err)
	l := Limit{Rate: 10, Burst: 1}
	ctx := context.Background()
	iv := interval(l.Rate, b.margin)

	cases := []struct {
		name  string
		state map[string]any
		most  float64 // the highest rate in force allowed
		least float64
	}{
		{"far above the configured rate", map[string]any{"eff": "1e9", "ceil": "1e9"}, 10, 10},
		{"above, below its ceiling", map[string]any{"eff": "50", "ceil": "1e12", "changed": "0"}, 10, 10},
		{"zero", map[string]any{"eff": "0", "ceil": "0", "changed": "1e15", "down": "1e15", "lifted": "1e15"}, 10, 10},
		{"negative", map[string]any{"eff": "-5", "ceil": "-5", "changed": "1e15", "down": "1e15", "lifted": "1e15"}, 10, 10},
		{"not a number", map[string]any{"eff": "nan", "ceil": "nan"}, 10, 10},
		{"infinite", map[string]any{"eff": "inf", "ceil": "inf"}, 10, 10},
		{"not numbers at all", map[string]any{"eff": "fast", "ceil": "{}"}, 10, 10},
		// Times in the future are taken as now: nothing recovers yet.
		{"below the floor", map[string]any{"eff": "1e-9", "ceil": "1e-9", "changed": "1e15", "down": "1e15", "lifted": "1e15"},
			10.0 / adaptFloorDiv, 10.0 / adaptFloorDiv},
		{"learned, times in the future", map[string]any{"eff": "5", "ceil": "8", "changed": "1e15", "down": "1e15", "lifted": "1e15"}, 5, 5},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "/k" + strconv.Itoa(i)
			state := map[string]any{"rate": "10", "changed": "0", "down": "0", "lifted": "0"}
			for k, v := range c.state {
				state[k] = v
			}
			// Written as a hostile writer would: no expiry.
			require.NoError(t, rc.HSet(ctx, b.tagged(b.adaptKey, key), state).Err())
			d, eff, _, _, err := b.step(ctx, key, l, "wait", -1)
			require.NoError(t, err, "the script runs")
			assert.Zero(t, d, "the first token is there")
			assert.LessOrEqual(t, eff, c.most)
			assert.GreaterOrEqual(t, eff, c.least)
			ttl, err := rc.PTTL(ctx, b.tagged(b.adaptKey, key)).Result()
			require.NoError(t, err)
			if ttl != -2*time.Nanosecond { // -2: deleted, back at the configured rate
				assert.Greater(t, ttl, time.Duration(0), "the state expires")
				assert.LessOrEqual(t, ttl, adaptTTL)
			}
			// The next token is at most an interval of the clamped rate
			// away (less when the machine was slow between the steps).
			d, _, _, _, err = b.step(ctx, key, l, "wait", -1)
			require.NoError(t, err)
			assert.LessOrEqual(t, d, interval(eff, b.margin)+time.Millisecond)
		})
	}

	t.Run("a time of arrival far ahead", func(t *testing.T) {
		key := "/tat"
		require.NoError(t, rc.Set(ctx, b.tagged(b.rateKey, key), "1e18", 0).Err())
		d, _, _, _, err := b.step(ctx, key, l, "wait", -1)
		require.NoError(t, err)
		assert.LessOrEqual(t, d, iv+time.Millisecond, "at most an interval away")
	})

	t.Run("a hostile observed rate", func(t *testing.T) {
		for i, seen := range []map[string]any{
			{"last": "1e18", "sum": "nan", "n": "-1"},
			{"last": "-5", "sum": "inf", "n": "1e300"},
			{"last": "x", "sum": "1e-300", "n": "1e300"}, // a rate of 1e600: above the rate in force, not obeyed
		} {
			key := "/seen" + strconv.Itoa(i)
			require.NoError(t, rc.HSet(ctx, b.tagged(b.seenKey, key), seen).Err())
			_, _, _, _, err := b.step(ctx, key, l, "wait", -1)
			require.NoError(t, err, "the script runs")
			_, eff, dir, _, err := b.step(ctx, key, l, "throttle", -1)
			require.NoError(t, err)
			assert.Equal(t, DirectionDown, dir)
			assert.GreaterOrEqual(t, eff, adaptFloor(l.Rate))
			assert.LessOrEqual(t, eff, l.Rate/2)
			ttl, err := rc.PTTL(ctx, b.tagged(b.seenKey, key)).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, time.Duration(0), "the observed rate expires")
			assert.LessOrEqual(t, ttl, adaptTTL)
		}
	})

	t.Run("a throttle on a hostile state", func(t *testing.T) {
		key := "/throttle"
		require.NoError(t, rc.HSet(ctx, b.tagged(b.adaptKey, key), map[string]any{"rate": "10", "eff": "1e9", "ceil": "1e9", "changed": "0", "down": "0", "lifted": "0"}).Err())
		_, eff, dir, _, err := b.step(ctx, key, l, "throttle", -1)
		require.NoError(t, err)
		assert.Equal(t, DirectionDown, dir)
		assert.Equal(t, 5.0, eff, "half of the clamped rate")
		ttl, err := rc.PTTL(ctx, b.tagged(b.adaptKey, key)).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, time.Duration(0))
		assert.LessOrEqual(t, ttl, adaptTTL)
	})
}
