package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/ratelimit"
	"streamgate/redisconn"
)

// gathered returns the value of the metric name whose labels include
// labels; the test fails when there is none.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := labelsOf(m)
			match := true
			for k, v := range labels {
				match = match && got[k] == v
			}
			if match {
				return value(m)
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// The limits and the replay record of the process, as NewLimits makes them
// for the redis backend with fail_mode open, while Redis hangs (SIGSTOP):
// the team limit still admits by the local limits, the replay record fails
// at once, and only the calls that opened the breaker, and one probe per
// window, waited for Redis. When Redis answers again, the breaker closes by
// itself, logged once.
func TestLimitsHangingRedis(t *testing.T) {
	srv := redistest.New(t)
	cfg := &config.Config{
		RateLimit: config.RateLimit{Backend: "redis", Redis: config.Redis{URL: srv.URL(), FailMode: "open"}},
		Networks:  map[string]*config.Network{"mainnet": {}},
	}
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zapcore.InfoLevel)
	ctx := context.Background()
	l, err := NewLimits(cfg, reg, zap.New(core), nil)
	require.NoError(t, err)
	t.Cleanup(l.Close)
	hook := &redistest.ReachHook{}
	l.client.AddHook(hook)
	replay := l.ReplayStore
	require.NotNil(t, replay)
	now := time.UnixMilli(1_750_000_000_000)
	firstUse := func(i int) error {
		_, err := replay.FirstUse(ctx, auth.ReplayUse{Team: "trading", Key: "k-trading", Sig: []byte(fmt.Sprintf("sig-%d", i)), Now: now, TTL: 10 * time.Second, Grace: time.Second})
		return err
	}
	limit := ratelimit.Limit{Rate: 1000, Burst: 1000}
	d, err := l.Limiter.Allow(ctx, "trading", limit)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, firstUse(-1))
	base := hook.Reached.Load()

	srv.Pause()
	const calls = 200
	rejected := 0
	for i := range calls {
		d, err := l.Limiter.Allow(ctx, "trading", limit)
		require.NoError(t, err, "fail_mode open decides locally")
		require.True(t, d.Allowed)
		err = firstUse(i)
		require.Error(t, err)
		if errors.Is(err, redisconn.ErrCircuitOpen) {
			rejected++
		}
	}
	probes := gathered(t, reg, "streamgate_redis_breaker_transitions_total", map[string]string{"to": "half-open"})
	waited := hook.Reached.Load() - base
	assert.Equal(t, waited, hook.Failed.Load(), "every call that reached the hung Redis failed")
	assert.EqualValues(t, redisconn.DefaultBreakerFailures+int(probes), waited,
		"calls that waited for the deadline: those that opened the breaker, one probe per window")
	assert.GreaterOrEqual(t, rejected, calls-int(waited), "replay calls failed at once")
	assert.Equal(t, 1, countLogs(logs, "redis unavailable: circuit breaker open"))

	srv.Resume()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		require.Less(t, i, 2000, "not recovered: %v", err)
		require.True(t, time.Now().Before(deadline), "not recovered: %v", err)
		if err = firstUse(10_000 + i); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	assert.Zero(t, gathered(t, reg, "streamgate_redis_breaker_state", nil), "closed")
	assert.EqualValues(t, 1, gathered(t, reg, "streamgate_redis_breaker_transitions_total", map[string]string{"to": "closed"}))
	assert.Equal(t, 1, countLogs(logs, "redis unavailable: circuit breaker open"))
	assert.Equal(t, 1, countLogs(logs, "redis recovered"))
}

func countLogs(logs *observer.ObservedLogs, prefix string) int {
	return logs.FilterMessageSnippet(prefix).Filter(func(e observer.LoggedEntry) bool {
		return strings.HasPrefix(e.Message, prefix)
	}).Len()
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// value is a metric's counter or gauge value.
func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}
