package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/internal/testing/redistest"
	"streamgate/redisconn"
)

func TestRedisReplay(t *testing.T) {
	srv := redistest.New(t)
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	opts.MaxRetries, opts.DialerRetries = -1, 1
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })

	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	var failures []error
	replica := func() *Verifier {
		return NewVerifier(VerifierConfig{
			MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayGrace: time.Second,
			Shared: NewRedisReplay(client, "test:replay:"), Now: func() time.Time { return clock },
			SharedFailed: func(err error) { failures = append(failures, err) },
		})
	}
	a, b := replica(), replica()
	req := func(target string) *http.Request {
		return signedRequest(target, "k-trading", "new-secret-0123456789", now)
	}

	r := req("/api/v1/feeds")
	_, err = a.Verify(ks, r)
	require.NoError(t, err)
	_, err = b.Verify(ks, r)
	assert.NoError(t, err, "a twin at another replica within the grace")
	clock = now.Add(1500 * time.Millisecond)
	_, err = b.Verify(ks, r)
	assert.ErrorIs(t, err, ErrReplay, "a replay at another replica after the grace")

	// The key expires with the skew window.
	all, err := client.Keys(t.Context(), "test:replay:*").Result()
	require.NoError(t, err)
	var keys []string // the signatures, not the teams' counts
	for _, k := range all {
		if !strings.HasPrefix(k, "test:replay:{trading}:team:") {
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, 1)
	ttl, err := client.PTTL(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 5*time.Second)
	assert.LessOrEqual(t, ttl, 10*time.Second)

	// Redis down: each replica still refuses what it saw itself.
	srv.Stop()
	clock = now
	r2 := req("/api/v1/feeds?x=2")
	_, err = a.Verify(ks, r2)
	assert.NoError(t, err, "the replica's own record decides while Redis fails")
	require.NotEmpty(t, failures)
	clock = now.Add(2 * time.Second)
	_, err = a.Verify(ks, r2)
	assert.ErrorIs(t, err, ErrReplay)
	assert.False(t, errors.Is(failures[0], ErrReplay))
}

// With Redis hung (SIGSTOP), the shared replay record fails at once, after
// the few calls that opened the breaker and one probe per breaker window;
// the verifier's local record decides meanwhile. When Redis answers again
// the record is shared again, without a restart.
func TestRedisReplayHangingRedis(t *testing.T) {
	srv := redistest.New(t)
	reg := prometheus.NewRegistry()
	m, err := redisconn.NewMetrics(reg)
	require.NoError(t, err)
	core, logs := observer.New(zapcore.InfoLevel)
	client, err := redisconn.NewURL(srv.URL(), "", redisconn.Options{
		CommandTimeout: 50 * time.Millisecond, BreakerOpen: 100 * time.Millisecond,
		Metrics: m, Logger: zap.New(core),
	})
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	hook := &redistest.ReachHook{}
	client.AddHook(hook)
	store := NewRedisReplay(client, "test:replay:")
	ctx := context.Background()
	now := time.UnixMilli(1_750_000_000_000)
	sig := func(i int) []byte { return []byte(fmt.Sprintf("signature-%d", i)) }
	first := func(i int) (bool, error) {
		return store.FirstUse(ctx, ReplayUse{Team: "trading", Key: "k-trading", Sig: sig(i), Now: now, TTL: 10 * time.Second, Grace: time.Second})
	}

	ok, err := first(-1)
	require.NoError(t, err)
	require.True(t, ok)
	base := hook.Reached.Load()

	srv.Pause()
	const calls = 200
	rejected := 0
	for i := range calls {
		_, err := first(i)
		require.Error(t, err)
		if errors.Is(err, redisconn.ErrCircuitOpen) {
			rejected++
		}
	}
	probes := int64(counterValue(t, reg, "streamgate_redis_breaker_transitions_total", "half-open"))
	waited := hook.Reached.Load() - base
	assert.Equal(t, waited, hook.Failed.Load(), "every call that reached the hung Redis failed")
	assert.EqualValues(t, redisconn.DefaultBreakerFailures+probes, waited,
		"the calls that waited for the deadline: those that opened the breaker and one probe per window")
	assert.EqualValues(t, calls-waited, rejected, "the others failed at once")
	assert.LessOrEqual(t, waited, int64(calls/10))

	srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		require.Less(t, i, 5000, "the shared record did not come back: %v", err)
		require.True(t, time.Now().Before(deadline), "the shared record did not come back: %v", err)
		if ok, err = first(1000); err == nil {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	assert.True(t, ok)
	ok, err = store.FirstUse(ctx, ReplayUse{Team: "trading", Key: "k-trading", Sig: sig(1000), Now: now.Add(2 * time.Second), TTL: 10 * time.Second, Grace: time.Second})
	require.NoError(t, err)
	assert.False(t, ok, "the use was recorded in Redis: a replay after the grace")
	assert.Equal(t, 1, logs.FilterMessageSnippet("redis unavailable").Len())
	assert.Equal(t, 1, logs.FilterMessageSnippet("redis recovered").Len())
}

// counterValue returns the value of the counter name whose label "to" is to.
func counterValue(t *testing.T, reg *prometheus.Registry, name, to string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "to" && l.GetValue() == to {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{to=%q}", name, to)
	return 0
}

// TestRedisReplayTeamShare: a team's first uses kept in Redis are bounded
// by its share; a team at its share is refused (a *ReplayFullError, Team
// set), another team is not, and a replay is still a replay.
func TestRedisReplayTeamShare(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.New(t).Addr()})
	t.Cleanup(func() { client.Close() })
	store := NewRedisReplay(client, "test:share:")
	ctx := context.Background()
	now := time.UnixMilli(1_750_000_000_000)
	use := func(team string, i int, at time.Time) (bool, error) {
		return store.FirstUse(ctx, ReplayUse{Team: team, TeamMax: 5, Key: team + "-key",
			Sig: []byte(fmt.Sprintf("sig-%d", i)), Now: at, TTL: 10 * time.Second})
	}
	for i := range 5 {
		ok, err := use("flood", i, now)
		require.NoError(t, err)
		require.True(t, ok)
	}
	_, err := use("flood", 5, now)
	var full *ReplayFullError
	require.ErrorAs(t, err, &full, "the team's share is used up")
	assert.True(t, full.Team)
	assert.Positive(t, full.RetryAfter)
	ok, err := use("flood", 0, now.Add(time.Second))
	require.NoError(t, err)
	assert.False(t, ok, "a replay is a replay, full or not")
	for i := range 5 {
		ok, err := use("quiet", i, now)
		require.NoError(t, err, "another team has its own share")
		assert.True(t, ok)
	}
	ok, err = use("flood", 6, now.Add(25*time.Second))
	require.NoError(t, err, "two periods later the share is free again")
	assert.True(t, ok)
}
