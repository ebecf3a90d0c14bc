package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type quotaStep struct {
	at        time.Time
	key       string
	limit     int64
	allowed   bool
	remaining int
	reset     time.Duration
}

// quotaSteps returns a step table around the end of the UTC day that starts
// at dayStart.
func quotaSteps(dayStart time.Time) []quotaStep {
	late := dayStart.Add(23*time.Hour + 59*time.Minute + 59*time.Second)
	next := dayStart.Add(24 * time.Hour)
	// The same instant seen from UTC+2: the day is still the UTC one.
	east := late.In(time.FixedZone("UTC+2", 2*3600))
	return []quotaStep{
		{dayStart, "a", 3, true, 2, 24 * time.Hour},
		{dayStart.Add(time.Hour), "a", 3, true, 1, 23 * time.Hour},
		{dayStart.Add(time.Hour), "b", 3, true, 2, 23 * time.Hour}, // keys are isolated
		{east, "a", 3, true, 0, time.Second},
		{late, "a", 3, false, 0, time.Second},
		{late, "a", 4, true, 0, time.Second}, // a raised limit is adopted
		{late, "a", 4, false, 0, time.Second},
		{late, "a", 0, true, 0, 0}, // no quota
		{next, "a", 3, true, 2, 24 * time.Hour},
		{next.Add(time.Second), "a", 3, true, 1, 24*time.Hour - time.Second},
	}
}

func runQuotaSteps(t *testing.T, q Quota, steps []quotaStep) {
	t.Helper()
	for i, s := range steps {
		d, err := q.Take(context.Background(), s.key, s.limit, s.at)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, s.allowed, d.Allowed, "step %d: allowed", i)
		assert.Equal(t, s.remaining, d.Remaining, "step %d: remaining", i)
		assert.Equal(t, s.reset, d.Reset, "step %d: reset", i)
		if s.allowed {
			assert.Zero(t, d.RetryAfter, "step %d: retry after", i)
		} else {
			assert.Equal(t, s.reset, d.RetryAfter, "step %d: retry after", i)
		}
		if s.limit > 0 {
			assert.Equal(t, int(s.limit), d.Limit.Burst, "step %d: limit", i)
		}
	}
}

func TestMemoryQuota(t *testing.T) {
	q, err := NewMemoryQuota(Options{})
	require.NoError(t, err)
	runQuotaSteps(t, q, quotaSteps(time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC)))
}

func TestMemoryQuotaLateEvent(t *testing.T) {
	q, err := NewMemoryQuota(Options{})
	require.NoError(t, err)
	midnight := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	_, err = q.Take(ctx, "a", 2, midnight.Add(-time.Second))
	require.NoError(t, err)
	d, err := q.Take(ctx, "a", 2, midnight)
	require.NoError(t, err)
	require.Equal(t, 1, d.Remaining)
	// An event stamped just before midnight, arriving after one stamped
	// just after it, counts into the new day instead of resetting it.
	d, err = q.Take(ctx, "a", 2, midnight.Add(-time.Millisecond))
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 0, d.Remaining)
	d, err = q.Take(ctx, "a", 2, midnight.Add(time.Millisecond))
	require.NoError(t, err)
	assert.False(t, d.Allowed)
}

func TestMemoryQuotaDropsPastDays(t *testing.T) {
	q, err := NewMemoryQuota(Options{MaxKeys: 1600})
	require.NoError(t, err)
	day1 := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	for i := range 1000 {
		_, err := q.Take(context.Background(), "k"+strconv.Itoa(i), 10, day1)
		require.NoError(t, err)
	}
	for i := range 1000 {
		_, err := q.Take(context.Background(), "n"+strconv.Itoa(i), 10, day1.Add(24*time.Hour))
		require.NoError(t, err)
	}
	assert.Less(t, q.keys.len(), 2000, "yesterday's counters are dropped as new keys arrive")
}

func TestDayOf(t *testing.T) {
	cases := []struct {
		t    time.Time
		day  int64
		left time.Duration
	}{
		{time.Unix(0, 0), 0, 24 * time.Hour},
		{time.Unix(86399, 999_999_999), 0, time.Nanosecond},
		{time.Unix(86400, 0), 1, 24 * time.Hour},
		{time.Unix(-1, 0), -1, time.Second},
	}
	for _, tc := range cases {
		day, left := dayOf(tc.t)
		assert.Equal(t, tc.day, day, "%v", tc.t)
		assert.Equal(t, tc.left, left, "%v", tc.t)
	}
}

func TestMemoryQuotaUsed(t *testing.T) {
	q, err := NewMemoryQuota(Options{Name: "daily"})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ctx := context.Background()
	for range 3 {
		if _, err := q.Take(ctx, "daily:t", 10, day); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := q.Used(ctx, "daily:t", day); n != 3 {
		t.Fatalf("used %d, want 3", n)
	}
	if n, _ := q.Used(ctx, "daily:t", day); n != 3 {
		t.Fatalf("Used counted an event: %d", n)
	}
	if n, _ := q.Used(ctx, "daily:t", day.Add(24*time.Hour)); n != 0 {
		t.Fatalf("the next day starts at %d", n)
	}
	if n, _ := q.Used(ctx, "daily:other", day); n != 0 {
		t.Fatalf("an unknown key used %d", n)
	}
}
