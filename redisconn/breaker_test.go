package redisconn

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// testCommandTimeout keeps the tests short; the default is 100ms.
const testCommandTimeout = 50 * time.Millisecond

// reach counts the calls that got past the circuit breaker, that is, that
// went to Redis, and how they ended. Added to a client of NewURL,
// it runs inside the breaker's hook.
type reach struct {
	calls, replies, timeouts, otherFailures atomic.Int64
}

func (r *reach) count(err error) {
	r.calls.Add(1)
	switch {
	case err == nil || answered(err):
		r.replies.Add(1)
	case isTimeout(err):
		r.timeouts.Add(1)
	default:
		r.otherFailures.Add(1)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func (r *reach) DialHook(next redis.DialHook) redis.DialHook { return next }

// reachCall marks the context of a counted call: the commands that set up a
// new connection run inside it, through the hooks again, and are not
// counted.
type reachCall struct{}

func (r *reach) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(reachCall{}) != nil {
			return next(ctx, cmd)
		}
		err := next(context.WithValue(ctx, reachCall{}, true), cmd)
		r.count(err)
		return err
	}
}

func (r *reach) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(reachCall{}) != nil {
			return next(ctx, cmds)
		}
		err := next(context.WithValue(ctx, reachCall{}, true), cmds)
		r.count(err)
		return err
	}
}

// breakerTest is a client of NewURL on a real redis-server, with
// its metrics, its log and the calls that reached Redis.
type breakerTest struct {
	srv    *redistest.Server
	client *Client
	m      *Metrics
	logs   *observer.ObservedLogs
	reach  *reach
}

func newBreakerTest(t *testing.T, srv *redistest.Server, opts Options) *breakerTest {
	t.Helper()
	if srv == nil {
		srv = redistest.New(t)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	bt := &breakerTest{srv: srv, m: newMetrics(t), logs: logs, reach: &reach{}}
	if opts.CommandTimeout == 0 {
		opts.CommandTimeout = testCommandTimeout
	}
	opts.Metrics, opts.Logger = bt.m, zap.New(core)
	c, err := NewURL(srv.URL(), "", opts)
	require.NoError(t, err)
	c.AddHook(bt.reach)
	t.Cleanup(func() { _ = c.Close() })
	bt.client = c
	return bt
}

func (bt *breakerTest) transitions(to gobreaker.State) int {
	return int(testutil.ToFloat64(bt.m.breakerTransitions.WithLabelValues("redis", to.String())))
}

func (bt *breakerTest) state() gobreaker.State {
	return gobreaker.State(testutil.ToFloat64(bt.m.breakerState.WithLabelValues("redis")))
}

func (bt *breakerTest) rejected() int {
	return int(testutil.ToFloat64(bt.m.breakerRejections.WithLabelValues("redis")))
}

// logged counts the log lines whose message starts with prefix.
func (bt *breakerTest) logged(level zapcore.Level, prefix string) int {
	n := 0
	for _, e := range bt.logs.All() {
		if e.Level == level && len(e.Message) >= len(prefix) && e.Message[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

var hangScript = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

// A hanging Redis: every kind of call (a command, a script, a pipeline, a
// transaction) fails, only the first DefaultBreakerFailures wait for the
// deadline, and the others fail at once with ErrCircuitOpen.
func TestRedisClientBreakerOpensOnHang(t *testing.T) {
	bt := newBreakerTest(t, nil, Options{BreakerOpen: time.Hour}) // no probe within the test
	ctx := context.Background()
	require.NoError(t, bt.client.Set(ctx, "k", "v", 0).Err())
	require.NoError(t, hangScript.Run(ctx, bt.client, []string{"n"}).Err())
	// Three replies: SET, then EVALSHA's NOSCRIPT and EVAL.
	require.EqualValues(t, 3, bt.reach.replies.Load())
	assert.Equal(t, gobreaker.StateClosed, bt.state())

	bt.srv.Pause()
	const calls = 200
	var open, other int
	for i := range calls {
		var err error
		switch i % 4 {
		case 0:
			err = bt.client.Get(ctx, "k").Err()
		case 1:
			err = hangScript.Run(ctx, bt.client, []string{"n"}).Err()
		case 2:
			_, err = bt.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "a")
				p.Incr(ctx, "b")
				return nil
			})
		case 3:
			_, err = bt.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "a")
				return nil
			})
		}
		require.Error(t, err)
		if errors.Is(err, ErrCircuitOpen) {
			open++
		} else {
			other++
		}
	}
	// Exactly the calls that opened the breaker waited; none after.
	assert.EqualValues(t, DefaultBreakerFailures, bt.reach.calls.Load()-3, "calls that reached Redis")
	assert.EqualValues(t, DefaultBreakerFailures, bt.reach.timeouts.Load(), "calls that waited for the deadline")
	assert.Equal(t, DefaultBreakerFailures, other)
	assert.Equal(t, calls-DefaultBreakerFailures, open)
	assert.Equal(t, calls-DefaultBreakerFailures, bt.rejected())
	assert.Equal(t, gobreaker.StateOpen, bt.state())
	assert.Equal(t, 1, bt.transitions(gobreaker.StateOpen))
	assert.Equal(t, 1, bt.logged(zapcore.WarnLevel, "redis unavailable"))
}

// together holds every call that reaches it until n have: they are all
// under way before any can fail. Added to a client of NewURL, it runs
// inside the breaker's hook.
type together struct {
	n       int
	arrived atomic.Int64
	all     chan struct{}
}

func (g *together) wait() {
	if int(g.arrived.Add(1)) == g.n {
		close(g.all)
	}
	<-g.all
}

func (g *together) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *together) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(reachCall{}) == nil { // not a connection's set-up
			g.wait()
		}
		return next(context.WithValue(ctx, reachCall{}, true), cmd)
	}
}

func (g *together) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Calls in flight together that fail together (Redis hung for one
// deadline) are one failure for the breaker, however many they are: the
// breaker stays closed and the next call goes to Redis. Calls sent one
// after another while Redis hangs still open it after
// DefaultBreakerFailures deadlines (TestRedisClientBreakerOpensOnHang).
func TestRedisClientBreakerCountsOneEventOnce(t *testing.T) {
	bt := newBreakerTest(t, nil, Options{BreakerOpen: time.Hour})
	ctx := context.Background()
	require.NoError(t, bt.client.Set(ctx, "k", "v", 0).Err())
	const inFlight = 4 * DefaultBreakerFailures
	g := &together{n: inFlight, all: make(chan struct{})}
	bt.client.AddHook(g)

	bt.srv.Pause()
	errs := make(chan error, inFlight)
	for range inFlight {
		go func() { errs <- bt.client.Get(ctx, "k").Err() }()
	}
	for range inFlight {
		err := <-errs
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrCircuitOpen, "every call was let through before any failed")
	}
	bt.srv.Resume()
	assert.EqualValues(t, inFlight, bt.reach.timeouts.Load(), "every call waited for its deadline")
	assert.Equal(t, gobreaker.StateClosed, bt.state())
	assert.Zero(t, bt.transitions(gobreaker.StateOpen), "one event, one failure")
	assert.Zero(t, bt.rejected())
	// (The hook lets the calls go one by one from now: all have arrived.)
	require.NoError(t, bt.client.Get(ctx, "k").Err(), "the next call goes to Redis")
}

// The breaker opens for every failure that is not a reply, not only
// timeouts: here, a refused connection.
func TestRedisClientBreakerOpensOnRefusedConnection(t *testing.T) {
	bt := newBreakerTest(t, nil, Options{BreakerOpen: time.Hour})
	ctx := context.Background()
	require.NoError(t, bt.client.Ping(ctx).Err())
	bt.srv.Stop()
	for range 50 {
		require.Error(t, bt.client.Get(ctx, "k").Err())
	}
	assert.EqualValues(t, 1+DefaultBreakerFailures, bt.reach.calls.Load())
	assert.Equal(t, 50-DefaultBreakerFailures, bt.rejected())
	assert.Equal(t, gobreaker.StateOpen, bt.state())
}

// While Redis hangs, the breaker lets one probe through per window, and
// only probes wait; the outage is logged once however many probes fail.
// When Redis answers again, the next probe closes the breaker by itself,
// which is logged once, and calls reach Redis again.
func TestRedisClientBreakerRecovers(t *testing.T) {
	const window = 100 * time.Millisecond
	bt := newBreakerTest(t, nil, Options{BreakerOpen: window})
	ctx := context.Background()
	require.NoError(t, bt.client.Ping(ctx).Err())
	before := bt.reach.calls.Load()

	bt.srv.Pause()
	// Call until three probes have failed: bounded in count and time.
	deadline := time.Now().Add(10 * time.Second)
	calls := 0
	for ; bt.transitions(gobreaker.StateHalfOpen) < 3 || bt.state() != gobreaker.StateOpen; calls++ {
		require.Less(t, calls, 5000, "the breaker let too few probes through")
		require.True(t, time.Now().Before(deadline), "the breaker let too few probes through")
		require.Error(t, bt.client.Get(ctx, "k").Err())
		time.Sleep(2 * time.Millisecond)
	}
	probes := bt.transitions(gobreaker.StateHalfOpen)
	reached := bt.reach.calls.Load() - before
	// The failures that opened the breaker, then one probe per window.
	assert.EqualValues(t, DefaultBreakerFailures+probes, reached, "calls that reached Redis")
	assert.EqualValues(t, reached, bt.reach.timeouts.Load(), "they all waited for the deadline")
	assert.EqualValues(t, calls, reached+int64(bt.rejected()))
	assert.Equal(t, probes+1, bt.transitions(gobreaker.StateOpen))
	assert.Equal(t, 1, bt.logged(zapcore.WarnLevel, "redis unavailable"), "one line for the outage")
	assert.Zero(t, bt.logged(zapcore.InfoLevel, "redis recovered"))

	bt.srv.Resume()
	var err error
	for i := 0; ; i++ {
		require.Less(t, i, 5000, "not recovered: %v", err)
		require.True(t, time.Now().Before(deadline.Add(10*time.Second)), "not recovered: %v", err)
		if err = bt.client.Set(ctx, "after", "yes", 0).Err(); err == nil {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	assert.Equal(t, gobreaker.StateClosed, bt.state())
	v, err := bt.client.Get(ctx, "after").Result()
	require.NoError(t, err)
	assert.Equal(t, "yes", v, "the write reached Redis")
	assert.Equal(t, 1, bt.transitions(gobreaker.StateClosed))
	assert.Equal(t, 1, bt.logged(zapcore.WarnLevel, "redis unavailable"))
	assert.Equal(t, 1, bt.logged(zapcore.InfoLevel, "redis recovered"), "one line for the recovery")
}

// Replies of Redis, errors included, are successes: the breaker stays
// closed however many there are. Calls that the caller itself gave up on
// count neither way.
func TestRedisClientBreakerIgnoresRepliesAndCallerContext(t *testing.T) {
	bt := newBreakerTest(t, nil, Options{BreakerOpen: time.Hour})
	ctx := context.Background()
	require.NoError(t, bt.client.Set(ctx, "str", "v", 0).Err())
	failing := redis.NewScript(`return redis.error_reply('NOPE a script error')`)
	for i := range 10 {
		assert.ErrorIs(t, bt.client.Get(ctx, "missing"+strconv.Itoa(i)).Err(), redis.Nil)
		assert.ErrorContains(t, failing.Run(ctx, bt.client, []string{"x"}).Err(), "NOPE")
		assert.ErrorContains(t, bt.client.Incr(ctx, "str").Err(), "not an integer")
		assert.ErrorContains(t, bt.client.LPush(ctx, "str", 1).Err(), "WRONGTYPE")
		assert.Error(t, bt.client.Do(ctx, "NOSUCHCOMMAND").Err())
	}
	assert.Equal(t, gobreaker.StateClosed, bt.state())
	assert.Zero(t, bt.transitions(gobreaker.StateOpen))
	assert.Zero(t, bt.reach.timeouts.Load()+bt.reach.otherFailures.Load())

	bt.srv.Pause()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for range 10 {
		assert.ErrorIs(t, bt.client.Get(cancelled, "k").Err(), context.Canceled)
	}
	for range 5 { // the caller's deadline comes before the command's
		short, cancel := context.WithTimeout(ctx, testCommandTimeout/5)
		assert.Error(t, bt.client.Get(short, "k").Err())
		cancel()
	}
	assert.Equal(t, gobreaker.StateClosed, bt.state(), "the callers gave up, Redis did not fail")
	assert.Zero(t, bt.rejected())
}

// While the breaker is open, no dial is attempted.
func TestRedisClientBreakerDialHook(t *testing.T) {
	h := newBreakerHook("127.0.0.1:1", Options{BreakerFailures: 2, BreakerOpen: time.Hour, CommandTimeout: time.Second, Logger: zap.NewNop()}, &clientMetrics{})
	dials := 0
	dial := h.DialHook(func(context.Context, string, string) (net.Conn, error) {
		dials++
		return nil, errors.New("refused")
	})
	_, err := dial(context.Background(), "tcp", "127.0.0.1:1")
	require.Error(t, err)
	assert.Equal(t, 1, dials)
	for range 2 {
		done, err := h.allow()
		require.NoError(t, err)
		h.report(context.Background(), done, time.Now(), errors.New("refused"))
	}
	_, err = dial(context.Background(), "tcp", "127.0.0.1:1")
	assert.ErrorIs(t, err, ErrCircuitOpen)
	assert.Equal(t, 1, dials, "no dial while open")
}

// A call that panics counts as a failure: a half-open breaker is not left
// waiting for its probe.
func TestRedisClientBreakerPanic(t *testing.T) {
	h := newBreakerHook("127.0.0.1:1", Options{BreakerFailures: 1, BreakerOpen: time.Hour, CommandTimeout: time.Second, Logger: zap.NewNop()}, &clientMetrics{})
	process := h.ProcessHook(func(context.Context, redis.Cmder) error { panic("boom") })
	assert.Panics(t, func() { _ = process(context.Background(), redis.NewCmd(context.Background(), "get", "k")) })
	assert.Equal(t, gobreaker.StateOpen, h.state())
}

func newMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return m
}

func TestNewOptions(t *testing.T) {
	c, err := NewURL("redis://127.0.0.1:1/2", "pw", Options{})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, ModeSingle, c.Mode())
	o := c.UniversalClient.(*redis.Client).Options()
	assert.Equal(t, "pw", o.Password)
	assert.Equal(t, 2, o.DB)
	assert.Equal(t, DefaultCommandTimeout, o.ReadTimeout)
	assert.Equal(t, DefaultDialTimeout, o.DialTimeout)
	assert.True(t, o.ContextTimeoutEnabled)
	assert.Equal(t, maxRetries, o.MaxRetries, "the library retries a failover's errors within the deadline")
	assert.Equal(t, 1, o.DialerRetries)

	_, err = NewURL("http://x", "", Options{})
	assert.Error(t, err)
	_, err = NewURL("redis://127.0.0.1:1/0", "", Options{BreakerOpen: -1})
	assert.Error(t, err)
}

// Neither the log lines nor the metrics carry the password.
func TestRedisClientBreakerLogsNoSecret(t *testing.T) {
	srv := redistest.New(t)
	core, logs := observer.New(zapcore.DebugLevel)
	const password = "hunter2-do-not-log"
	c, err := NewURL(srv.URL(), password, Options{
		CommandTimeout: testCommandTimeout, BreakerOpen: time.Hour, Logger: zap.New(core), Metrics: newMetrics(t),
	})
	require.NoError(t, err)
	defer c.Close()
	srv.Pause()
	for range 2 * DefaultBreakerFailures {
		require.Error(t, c.Get(context.Background(), "k").Err())
	}
	require.NotZero(t, logs.Len())
	for _, e := range logs.All() {
		assert.NotContains(t, e.Message, password)
		for k, v := range e.ContextMap() {
			assert.NotContains(t, toString(v), password, k)
		}
		if e.Level == zapcore.WarnLevel {
			assert.Equal(t, srv.Addr(), e.ContextMap()["addr"])
		}
	}
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}

// isClosed reports whether ch is closed now.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Ready is closed while the breaker is closed; the channel of an outage
// is open from the breaker's opening to its closing, and a new outage
// has a new one.
func TestRedisClientReady(t *testing.T) {
	bt := newBreakerTest(t, nil, Options{BreakerOpen: 50 * time.Millisecond})
	ctx := context.Background()
	require.NoError(t, bt.client.Ping(ctx).Err())
	assert.True(t, isClosed(bt.client.Ready()), "closed while Redis serves")

	for outage := range 2 {
		bt.srv.Pause()
		var err error
		for i := 0; !errors.Is(err, ErrCircuitOpen); i++ {
			require.Less(t, i, 100, "the breaker did not open")
			err = bt.client.Get(ctx, "k").Err()
		}
		ready := bt.client.Ready()
		assert.False(t, isClosed(ready), "outage %d: open while the breaker is open", outage)
		bt.srv.Resume()
		// The breaker's own probe closes it: call at a pace until one
		// succeeds, bounded in count.
		for i := 0; ; i++ {
			require.Less(t, i, 5000, "not recovered: %v", err)
			if err = bt.client.Ping(ctx).Err(); err == nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		assert.True(t, isClosed(ready), "outage %d: closed with the breaker", outage)
		assert.True(t, isClosed(bt.client.Ready()))
		assert.Equal(t, outage+1, bt.transitions(gobreaker.StateClosed))
	}
}
