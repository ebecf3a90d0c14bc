package usage_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/usage"
)

// clock is a settable clock for the ledger's days.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func day(s string) time.Time {
	d, err := usage.ParseDay(s)
	if err != nil {
		panic(err)
	}
	return d
}

// traffic records a known day of two teams.
func traffic(l *usage.Ledger) {
	for range 3 {
		l.Request(time.Time{}, "mainnet", "trading", "reports", 200, 1, 100)
	}
	l.Request(time.Time{}, "mainnet", "trading", "bulk", 206, 4, 1000)
	l.Request(time.Time{}, "mainnet", "trading", "latest", 429, 0, 80)
	l.UpstreamCall("mainnet", "trading")
	l.Request(time.Time{}, "mainnet", "research", "ws", 101, 0, 0)
	l.Frames("mainnet", "research", 10, 4000)
	l.Request(time.Time{}, "mainnet", "", "other", 404, 0, 50)
}

func checkTraffic(t *testing.T, rows []usage.Row, times int64) {
	t.Helper()
	require.Len(t, rows, 3)
	byTeam := map[string]usage.Row{}
	for _, r := range rows {
		assert.Equal(t, "mainnet", r.Network)
		byTeam[r.Team] = r
	}
	tr := byTeam["trading"]
	assert.Equal(t, map[string]map[string]int64{
		"reports": {"2xx": 3 * times}, "bulk": {"2xx": times}, "latest": {"429": times},
	}, tr.ByEndpoint)
	assert.Equal(t, 5*times, tr.Requests)
	assert.Equal(t, 7*times, tr.Reports)
	assert.Equal(t, times, tr.UpstreamCalls)
	assert.Equal(t, 1380*times, tr.RESTBytes)
	assert.Equal(t, 1380*times, tr.Bytes)
	rs := byTeam["research"]
	assert.Equal(t, map[string]map[string]int64{"ws": {"1xx": times}}, rs.ByEndpoint)
	assert.Equal(t, 10*times, rs.Frames)
	assert.Equal(t, 4000*times, rs.StreamBytes)
	assert.Equal(t, 4000*times, rs.Bytes)
	none := byTeam[""]
	assert.Equal(t, map[string]map[string]int64{"other": {"4xx": times}}, none.ByEndpoint)
}

// TestMemoryLedger: the figures of a day, split by team; a day past the
// retention is dropped; a team filter; the days are the clock's, in UTC.
func TestMemoryLedger(t *testing.T) {
	c := &clock{t: time.Date(2026, 3, 1, 23, 30, 0, 0, time.FixedZone("east", 3600))} // 22:30 UTC
	l := usage.NewMemory(usage.Config{Now: c.now})
	traffic(l)
	rows, err := l.Read(t.Context(), day("2026-03-01"), day("2026-03-01"), "")
	require.NoError(t, err)
	checkTraffic(t, rows, 1)
	assert.False(t, l.Shared())

	rows, err = l.Read(t.Context(), day("2026-03-01"), day("2026-03-01"), "research")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, "research", rows[0].Team)

	// A year and more later, the old day is gone.
	c.t = c.t.Add(usage.Retention + 48*time.Hour)
	l.Request(time.Time{}, "mainnet", "trading", "reports", 200, 1, 1)
	rows, err = l.Read(t.Context(), day("2026-03-01"), day("2026-03-01"), "")
	require.NoError(t, err)
	assert.Empty(t, rows)
	require.NoError(t, l.Close(t.Context()))
}

// TestRedisLedgerSharedAndOnce: two ledgers on one Redis add up; a batch
// whose reply was lost (Redis hung while it was sent, and ran it once
// back) is sent again and counted once; the day's hash expires after the
// retention; its fields do not grow with the traffic.
func TestRedisLedgerSharedAndOnce(t *testing.T) {
	rs := redistest.New(t)
	opt, err := redis.ParseURL(rs.URL())
	require.NoError(t, err)
	rc := redis.NewClient(opt)
	t.Cleanup(func() { rc.Close() })
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	a := usage.NewRedis(rc, "", usage.Config{Now: c.now})
	b := usage.NewRedis(rc, "", usage.Config{Now: c.now})
	traffic(a)
	traffic(b)
	require.NoError(t, a.Flush(t.Context()))
	rows, err := b.Read(t.Context(), day("2026-03-01"), day("2026-03-01"), "")
	require.NoError(t, err)
	checkTraffic(t, rows, 2)
	assert.True(t, b.Shared())
	key := usage.DefaultPrefix + "{2026-03-01}"
	fields, err := rc.HLen(t.Context(), key).Result()
	require.NoError(t, err)

	// Redis hangs while a's batch is sent: the flush fails, the batch is
	// kept; Redis, back, runs what it had received; the batch sent again
	// is not applied twice.
	traffic(a)
	rs.Pause()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err = a.Flush(ctx)
	cancel()
	rs.Resume()
	require.Error(t, err, "the flush cannot finish while Redis hangs")
	assert.Positive(t, a.Pending())
	require.NoError(t, a.Flush(t.Context()))
	assert.Zero(t, a.Pending())
	rows, err = b.Read(t.Context(), day("2026-03-01"), day("2026-03-01"), "")
	require.NoError(t, err)
	checkTraffic(t, rows, 3)

	// The same traffic again and again: the same fields.
	for range 100 {
		traffic(a)
	}
	require.NoError(t, a.Close(t.Context()))
	after, err := rc.HLen(t.Context(), key).Result()
	require.NoError(t, err)
	assert.Equal(t, fields, after)
	ttl, err := rc.TTL(t.Context(), key).Result()
	require.NoError(t, err)
	want := time.Until(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC).Add(usage.Retention))
	assert.InDelta(t, want.Seconds(), ttl.Seconds(), 60, "expires 400 days after the day's end")
}

// TestClassAndDay: the result classes and the day's form.
func TestClassAndDay(t *testing.T) {
	for status, class := range map[int]string{101: "1xx", 200: "2xx", 206: "2xx", 304: "3xx", 400: "4xx", 404: "4xx", 429: "429", 499: "4xx", 500: "5xx", 503: "5xx"} {
		assert.Equal(t, class, usage.ClassOf(status), "%d", status)
	}
	for _, bad := range []string{"2026-2-3", "2026-02-30", "20260203", "today", "", "2026-02-03T00:00:00Z"} {
		_, err := usage.ParseDay(bad)
		assert.Error(t, err, bad)
	}
	d, err := usage.ParseDay("2026-02-03")
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 2, 3, 0, 0, 0, 0, time.UTC), d)
}

// TestLedgerFlushesWhileRecording: the flusher runs (every millisecond)
// while requests are recorded, often finding nothing to write; every
// figure reaches the store once, and the race detector finds nothing.
func TestLedgerFlushesWhileRecording(t *testing.T) {
	l := usage.NewMemory(usage.Config{FlushInterval: time.Millisecond})
	l.Start()
	const writers, each = 4, 2000
	done := make(chan struct{})
	for range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				l.Request(time.Time{}, "mainnet", "trading", "latest", 200, 1, 10)
				if i%100 == 0 {
					l.UpstreamCall("mainnet", "trading")
				}
			}
		}()
	}
	for range writers {
		<-done
	}
	require.NoError(t, l.Close(t.Context()))
	d := l.Day()
	rows, err := l.Read(t.Context(), d.AddDate(0, 0, -1), d, "")
	require.NoError(t, err)
	var reqs, calls, bytes int64
	for _, r := range rows {
		reqs += r.Requests
		calls += r.UpstreamCalls
		bytes += r.RESTBytes
	}
	assert.EqualValues(t, writers*each, reqs)
	assert.EqualValues(t, writers*each/100, calls)
	assert.EqualValues(t, writers*each*10, bytes)
}
