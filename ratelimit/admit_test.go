package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/redistest"
)

// The admission in one script decides as the checks one by one do, on the
// same buckets, in one round trip.
func TestRedisAdmitterDecidesAsOneByOne(t *testing.T) {
	url := redistest.Start(t)
	client := newClient(t, url)
	reach := &redistest.ReachHook{}
	client.AddHook(reach)
	m := newMetrics(t)
	limiter, err := NewRedis(client, Options{Name: "team", Metrics: m})
	require.NoError(t, err)
	quota, err := NewRedisQuota(client, Options{Name: "daily", Metrics: m})
	require.NoError(t, err)
	adm := NewRedisAdmitter(limiter, quota)
	ctx := context.Background()
	now := time.Now()
	keyLimit, teamLimit := Limit{Rate: 0.001, Burst: 3}, Limit{Rate: 0.001, Burst: 5}
	const daily = 7

	// oneByOne makes the checks as the gateway does without an Admitter.
	oneByOne := func(team string) []Decision {
		var ds []Decision
		for _, r := range []AdmitRate{{KeyRateKey(team, "k1"), keyLimit}, {TeamRateKey(team), teamLimit}} {
			d, err := limiter.Allow(ctx, r.Key, r.Limit)
			require.NoError(t, err)
			ds = append(ds, d)
			if !d.Allowed {
				return ds
			}
		}
		d, err := quota.Take(ctx, DailyKey(team), daily, now)
		require.NoError(t, err)
		return append(ds, d)
	}
	admission := func(team, key string) Admission {
		return Admission{Rates: []AdmitRate{{KeyRateKey(team, key), keyLimit}, {TeamRateKey(team), teamLimit}},
			DailyKey: DailyKey(team), Daily: daily, Now: now}
	}
	// Key k1 alone: its own rate refuses after 3, sparing the team's.
	for i := range 5 {
		want := oneByOne("apart")
		before := reach.Reached.Load()
		got, err := adm.Admit(ctx, admission("together", "k1"))
		require.NoError(t, err)
		if i > 0 { // the first also loads the script (NOSCRIPT, then EVAL)
			assert.EqualValues(t, 1, reach.Reached.Load()-before, "one round trip")
		}
		require.Len(t, got, len(want), "request %d", i)
		for j := range want {
			assert.Equal(t, want[j].Allowed, got[j].Allowed, "request %d check %d", i, j)
			assert.Equal(t, want[j].Remaining, got[j].Remaining, "request %d check %d", i, j)
			assert.Equal(t, want[j].Limit, got[j].Limit)
			assert.InDelta(t, want[j].RetryAfter.Seconds(), got[j].RetryAfter.Seconds(), 1, "request %d check %d", i, j)
		}
	}
	// Other keys of the team: the team's rate refuses after 5 admitted in
	// all, and the daily quota counted each admitted request.
	var allowed int
	for i := range 4 {
		got, err := adm.Admit(ctx, admission("together", "k"+string(rune('2'+i))))
		require.NoError(t, err)
		last := got[len(got)-1]
		if last.Allowed {
			allowed++
			assert.Len(t, got, 3)
		}
	}
	assert.Equal(t, 2, allowed, "the team's burst of 5, 3 of it spent by k1")
	used, err := quota.Used(ctx, DailyKey("together"), now)
	require.NoError(t, err)
	assert.EqualValues(t, 5, used)
	// The Limiter reads the buckets the script wrote.
	d, err := limiter.Allow(ctx, TeamRateKey("together"), teamLimit)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the team's bucket is the Limiter's")
}

// While Redis fails the Admitter answers ErrAdmitApart, and then at once,
// without a call, until the Limiter and the Quota use Redis again.
func TestRedisAdmitterApartWhileRedisFails(t *testing.T) {
	ft := newFailTest(t, FailOpen)
	reach := &redistest.ReachHook{}
	ft.client.AddHook(reach)
	limiter, err := NewRedis(ft.client, ft.opts)
	require.NoError(t, err)
	quota, err := NewRedisQuota(ft.client, ft.opts)
	require.NoError(t, err)
	adm := NewRedisAdmitter(limiter, quota)
	ctx := context.Background()
	a := Admission{Rates: []AdmitRate{{TeamRateKey("t"), Limit{Rate: 1, Burst: 5}}}, DailyKey: DailyKey("t"), Daily: 10, Now: ft.clock.Now()}
	_, err = adm.Admit(ctx, a)
	require.NoError(t, err)

	ft.srv.Stop()
	_, err = adm.Admit(ctx, a)
	require.ErrorIs(t, err, ErrAdmitApart)
	calls := reach.Reached.Load()
	_, err = adm.Admit(ctx, a)
	require.ErrorIs(t, err, ErrAdmitApart)
	assert.Equal(t, calls, reach.Reached.Load(), "no call while the limits fall back")
	d, err := limiter.Allow(ctx, TeamRateKey("t"), Limit{Rate: 1, Burst: 5})
	require.NoError(t, err)
	assert.True(t, d.Allowed, "fail open: the local limit decides")
	assert.Equal(t, calls, reach.Reached.Load(), "the limiter falls back without a call")
}
