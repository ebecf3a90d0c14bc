package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/internal/testing/redistest"
)

// newAdmitter returns a RedisAdmitter on a Redis of its own, with its
// Limiter and Quota, and its client's count of round trips.
func newAdmitter(t *testing.T) (*redis.Client, *redistest.ReachHook, *Redis, *RedisQuota, *RedisAdmitter) {
	t.Helper()
	client := newClient(t, redistest.Start(t))
	reach := &redistest.ReachHook{}
	client.AddHook(reach)
	m := newMetrics(t)
	limiter, err := NewRedis(client, Options{Name: "team", Metrics: m})
	require.NoError(t, err)
	quota, err := NewRedisQuota(client, Options{Name: "daily", Metrics: m})
	require.NoError(t, err)
	return client, reach, limiter, quota, NewRedisAdmitter(limiter, quota)
}

// The admission in one script decides as the checks one by one do, on the
// same buckets, in one round trip.
func TestRedisAdmitterDecidesAsOneByOne(t *testing.T) {
	_, reach, limiter, quota, adm := newAdmitter(t)
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

// The replay record's check in the admission's call decides as
// auth.RedisReplay's own script on the same kind of keys, refuses a seen
// signature or a full team before any rate or quota is taken, and records
// a first use only when every check admits it: one round trip each.
func TestRedisAdmitterFirstUse(t *testing.T) {
	client, reach, _, _, adm := newAdmitter(t)
	ctx := context.Background()
	apart, together := auth.NewRedisReplay(client, "apart:"), auth.NewRedisReplay(client, "together:")
	base := time.UnixMilli(1_800_000_000_000)
	const ttl, grace = 10 * time.Second, 100 * time.Millisecond
	use := func(team, sig string, at time.Duration, most int) auth.ReplayUse {
		return auth.ReplayUse{Team: team, TeamMax: most, Key: "k", Sig: []byte(sig), Now: base.Add(at), TTL: ttl, Grace: grace}
	}
	firstUse := func(u auth.ReplayUse) *AdmitFirstUse {
		k := together.Keys(u)
		return &AdmitFirstUse{Key: k.Sig, Counts: k.Counts, At: u.Now, TTL: k.TTL, Grace: u.Grace, Most: u.TeamMax}
	}
	// admit makes one admission of u with the team's rate (burst 3), in
	// one round trip once the script is loaded.
	teamLimit := Limit{Rate: 0.001, Burst: 3}
	admit := func(u auth.ReplayUse) ([]Decision, error) {
		_, _ = adm.Admit(ctx, Admission{Rates: []AdmitRate{{TeamRateKey("warm"), teamLimit}}, Now: base}) // loads the script
		before := reach.Reached.Load()
		ds, err := adm.Admit(ctx, Admission{Rates: []AdmitRate{{TeamRateKey(u.Team), teamLimit}}, Now: base, FirstUse: firstUse(u)})
		assert.EqualValues(t, 1, reach.Reached.Load()-before, "one round trip")
		return ds, err
	}

	// As RedisReplay decides: first use, within the grace, after it, a
	// team at its most (2 first uses kept).
	for i, u := range []auth.ReplayUse{
		use("same", "a", 0, 2), use("same", "a", 50*time.Millisecond, 2), use("same", "a", 200*time.Millisecond, 2),
		use("same", "b", 300*time.Millisecond, 2), use("same", "c", 400*time.Millisecond, 2), use("same", "b", 450*time.Millisecond, 2),
	} {
		wantOK, wantErr := apart.FirstUse(ctx, u)
		_, err := adm.Admit(ctx, Admission{Now: base, FirstUse: firstUse(u)})
		switch {
		case wantErr != nil:
			var full *auth.ReplayFullError
			require.ErrorAs(t, wantErr, &full, "use %d", i)
			assert.ErrorIs(t, err, ErrGroupFull, "use %d", i)
			assert.Equal(t, full, together.Keys(u).FullError(u.Now), "use %d: the same Retry-After", i)
		case wantOK:
			assert.NoError(t, err, "use %d", i)
		default:
			assert.ErrorIs(t, err, ErrSeen, "use %d", i)
		}
	}

	// A seen signature takes nothing of the team's rate.
	ds, err := admit(use("rated", "x", 0, 0))
	require.NoError(t, err)
	require.Len(t, ds, 1)
	assert.Equal(t, 2, ds[0].Remaining)
	_, err = admit(use("rated", "x", time.Second, 0))
	require.ErrorIs(t, err, ErrSeen)
	// Nor does one refused because its team is at its most (1: x).
	_, err = admit(use("rated", "y", time.Second, 1))
	require.ErrorIs(t, err, ErrGroupFull)
	ds, err = admit(use("rated", "y", time.Second, 0))
	require.NoError(t, err)
	assert.Equal(t, 1, ds[0].Remaining, "neither took a token")
	ds, err = admit(use("rated", "z", time.Second, 0))
	require.NoError(t, err)
	require.True(t, ds[0].Allowed)
	// The rate refuses w: its signature is not recorded, and w is a first
	// use again once the rate admits.
	ds, err = admit(use("rated", "w", time.Second, 0))
	require.NoError(t, err)
	require.False(t, ds[0].Allowed)
	n, err := client.Exists(ctx, firstUse(use("rated", "w", time.Second, 0)).Key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a refused request's signature is not recorded")
	for _, sig := range []string{"x", "y", "z"} {
		n, err := client.Exists(ctx, firstUse(use("rated", sig, 0, 0)).Key).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "admitted %s is recorded", sig)
	}
	ok, err := together.FirstUse(ctx, use("rated", "w", 2*time.Second, 0))
	require.NoError(t, err)
	assert.True(t, ok, "w was never used")
	ok, err = together.FirstUse(ctx, use("rated", "z", 2*time.Second, 0))
	require.NoError(t, err)
	assert.False(t, ok, "z is a replay in the store's own check too")
}
