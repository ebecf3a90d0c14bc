package redisconn

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/internal/testing/redistest"
)

// failoverCase is a client whose breaker cannot close by its own timer
// within a test (BreakerOpen is an hour): after a failover, only the
// client's own look at the new masters can close it.
type failoverCase struct {
	c    *Client
	m    *Metrics
	logs *observer.ObservedLogs
}

func newFailoverCase(t *testing.T, target Target) *failoverCase {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	fc := &failoverCase{m: newMetrics(t), logs: logs}
	c, err := New(target, Options{Name: "ratelimit", Metrics: fc.m, Logger: zap.New(core), BreakerOpen: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	fc.c = c
	return fc
}

// openBreaker writes key until the breaker refuses the call: the master
// that serves it is gone. Bounded in count (failures, the breaker's
// setting): each call fails at once.
func (fc *failoverCase) openBreaker(t *testing.T, key string, failures int) {
	t.Helper()
	var err error
	for i := 0; !errors.Is(err, ErrCircuitOpen); i++ {
		require.LessOrEqual(t, i, failures, "the breaker did not open: %v", err)
		err = fc.c.Set(context.Background(), key, "during", 0).Err()
	}
}

// waitReady waits until ready is closed: the breaker closed. The bound
// only ends a test that would otherwise hang.
func (fc *failoverCase) waitReady(t *testing.T, ready <-chan struct{}) {
	t.Helper()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		for _, e := range fc.logs.All() {
			t.Logf("%s %s %v", e.Level, e.Message, e.ContextMap())
		}
		t.Fatalf("the breaker did not close after the failover: %s", fc.c.Health())
	}
}

func (fc *failoverCase) transitions(to gobreaker.State) int {
	return int(testutil.ToFloat64(fc.m.breakerTransitions.WithLabelValues("ratelimit", to.String())))
}

// recovered returns the "closed_by" of each recovery logged.
func (fc *failoverCase) recovered() []string {
	var by []string
	for _, e := range fc.logs.FilterMessage("redis recovered: circuit breaker closed").All() {
		by = append(by, e.ContextMap()["closed_by"].(string))
	}
	return by
}

// checkRecovered asserts what a recovery after one failover leaves: the
// failover counted once, the breaker opened once and closed once, by the
// probe of the new master, and writes served at once.
func (fc *failoverCase) checkRecovered(t *testing.T, key string) {
	t.Helper()
	for _, e := range fc.logs.FilterMessage("redis failover seen: the masters moved").All() {
		t.Logf("failover seen: %v", e.ContextMap()) // what a failed count is made of
	}
	require.NoError(t, fc.c.Set(context.Background(), key, "after", 0).Err(), "the first write after the recovery")
	assert.Empty(t, fc.c.Health())
	assert.Equal(t, 1.0, testutil.ToFloat64(fc.m.failovers.WithLabelValues("ratelimit")), "failovers counted")
	assert.Equal(t, 1, fc.transitions(gobreaker.StateOpen), "the breaker opened once")
	assert.Equal(t, 1, fc.transitions(gobreaker.StateClosed), "and closed once")
	assert.Equal(t, []string{probeAfterFailover}, fc.recovered())
}

// A Sentinel failover closes the breaker as soon as the sentinels name
// the new master and it says it is master, not a breaker's period later.
func TestClientReadyAfterSentinelFailover(t *testing.T) {
	s := redistest.NewSentinel(t)
	fc := newFailoverCase(t, Target{Sentinel: &Sentinel{Master: redistest.SentinelMaster, Addrs: s.Addrs()}})
	require.NoError(t, fc.c.Set(context.Background(), "k", "before", 0).Err())

	killed := s.KillMaster()
	fc.openBreaker(t, "k", DefaultBreakerFailures)
	ready := fc.c.Ready()
	require.False(t, isClosed(ready), "open while the master is gone")
	s.WaitFailover(killed)
	fc.waitReady(t, ready)
	fc.checkRecovered(t, "k")
}

// A Cluster failover closes the breaker as soon as the cluster serves the
// dead master's slots from its replica.
func TestClientReadyAfterClusterFailover(t *testing.T) {
	cl := redistest.NewCluster(t)
	fc := newFailoverCase(t, Target{Cluster: cl.Addrs()[:2]})
	const key = "{team}:a"
	require.NoError(t, fc.c.Set(context.Background(), key, "before", 0).Err())

	killed := cl.KillMaster(key)
	fc.openBreaker(t, key, DefaultBreakerFailures)
	ready := fc.c.Ready()
	require.False(t, isClosed(ready), "open while the slot's master is gone")
	cl.WaitFailover(killed)
	fc.waitReady(t, ready)
	fc.checkRecovered(t, key)
}

// failedDials counts the dials that reached the network and failed.
type failedDials struct{ n atomic.Int64 }

func (f *failedDials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			f.n.Add(1)
		}
		return c, err
	}
}
func (f *failedDials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f *failedDials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// go-redis stops dialing for its callers after as many failed dials as
// its pool has connections, until a dial of its own (once a second)
// succeeds. Here the master is gone long enough for that before the
// breaker opens: once the failover is seen, the pool's own dial must get
// through the open breaker to the new master, or neither the probe nor
// any call ever would.
func TestClientReadyAfterSentinelFailoverPoolGaveUp(t *testing.T) {
	s := redistest.NewSentinel(t)
	core, logs := observer.New(zapcore.DebugLevel)
	m := newMetrics(t)
	// Each failed call fails a dial at least until the pool gives up (its
	// size is go-redis's default, ten per CPU).
	failures := 10*runtime.GOMAXPROCS(0) + DefaultBreakerFailures
	c, err := New(Target{Sentinel: &Sentinel{Master: redistest.SentinelMaster, Addrs: s.Addrs()}},
		Options{Name: "ratelimit", Metrics: m, Logger: zap.New(core), BreakerOpen: time.Hour, BreakerFailures: failures})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	fc := &failoverCase{c: c, m: m, logs: logs}
	dials := &failedDials{}
	c.AddHook(dials)
	poolSize := c.UniversalClient.(*redis.Client).Options().PoolSize
	require.NoError(t, c.Set(context.Background(), "k", "before", 0).Err())

	killed := s.KillMaster()
	fc.openBreaker(t, "k", failures)
	require.GreaterOrEqual(t, dials.n.Load(), int64(poolSize), "the pool has given up dialing for its callers")
	ready := c.Ready()
	require.False(t, isClosed(ready))
	s.WaitFailover(killed)
	fc.waitReady(t, ready)
	fc.checkRecovered(t, "k")
}
