package redisconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
)

// recoverBound is the longest a client may take, after the failover has
// ended as the servers see it, to serve writes again.
const recoverBound = 2 * time.Second

// untilServes writes key with c until a write succeeds and returns how
// long that took; it fails the test after bound.
func untilServes(t *testing.T, c *Client, key string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < bound {
		if last = c.Set(context.Background(), key, "v", time.Minute).Err(); last == nil {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond) // a retry pace, not a synchronisation
	}
	t.Fatalf("no write succeeded within %v of the failover's end: %v", bound, last)
	return 0
}

func TestClientFollowsSentinelFailover(t *testing.T) {
	s := redistest.NewSentinel(t)
	m := newMetrics(t)
	c, err := New(Target{Sentinel: &Sentinel{Master: redistest.SentinelMaster, Addrs: s.Addrs()}},
		Options{Name: "ratelimit", Metrics: m, WatchInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, ModeSentinel, c.Mode())
	ok, err := c.CheckServer(context.Background())
	require.NoError(t, err)
	assert.True(t, ok)
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "before", 0).Err())
	assert.Equal(t, 1.0, testutil.ToFloat64(m.mode.WithLabelValues("ratelimit", "sentinel")))

	killed := s.KillMaster()
	_, took := s.WaitFailover(killed)
	t.Logf("sentinel failover took %v", took)
	back := untilServes(t, c, "k", recoverBound)
	t.Logf("the client wrote again %v after the failover's end", back)
	assert.Empty(t, c.Health(), "healthy once it writes again")
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.failovers.WithLabelValues("ratelimit")) == 1 },
		5*time.Second, 10*time.Millisecond, "the failover is counted once")
}

func TestClientFollowsClusterFailover(t *testing.T) {
	cl := redistest.NewCluster(t)
	m := newMetrics(t)
	c, err := New(Target{Cluster: cl.Addrs()[:2]},
		Options{Name: "ratelimit", Metrics: m, WatchInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, ModeCluster, c.Mode())
	ctx := context.Background()
	// Keys of one hash tag in one call: one slot, one node.
	pipe := c.TxPipeline()
	pipe.Set(ctx, "{team}:a", "1", 0)
	pipe.Set(ctx, "{team}:b", "2", 0)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	// Without a common tag they are refused: the tags are needed.
	err = c.Eval(ctx, "return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)", []string{"x:a", "x:b"}).Err()
	if redistest.Slot("x:a") != redistest.Slot("x:b") {
		require.Error(t, err)
		assert.Equal(t, KindCrossSlot, kindOf(err))
	}

	killed := cl.KillMaster("{team}:a")
	took := cl.WaitFailover(killed)
	t.Logf("cluster failover took %v", took)
	back := untilServes(t, c, "{team}:a", recoverBound)
	t.Logf("the client wrote again %v after the failover's end", back)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.failovers.WithLabelValues("ratelimit")) >= 1 },
		5*time.Second, 10*time.Millisecond, "the failover is counted")
	assert.Positive(t, testutil.ToFloat64(m.roundTrips.WithLabelValues("ratelimit")))
	assert.Positive(t, testutil.ToFloat64(m.commands.WithLabelValues("ratelimit")))
}

// A single-node url that names a cluster node or a replica is refused with
// a message that says what to configure instead; a server that does not
// answer is not refused.
func TestCheckServerRefusesClusterNodeAndReplica(t *testing.T) {
	check := func(addr string) (bool, error) {
		c, err := NewURL("redis://"+addr+"/0", "", Options{CommandTimeout: time.Second})
		require.NoError(t, err)
		defer c.Close()
		return c.CheckServer(context.Background())
	}
	cl := redistest.NewCluster(t)
	ok, err := check(cl.Addrs()[0])
	assert.True(t, ok)
	require.ErrorIs(t, err, ErrNotMaster)
	assert.Contains(t, err.Error(), "is a Redis Cluster node")
	assert.Contains(t, err.Error(), "cluster: {addrs")

	s := redistest.NewSentinel(t)
	ok, err = check(s.Replica().Addr())
	assert.True(t, ok)
	require.ErrorIs(t, err, ErrNotMaster)
	assert.Contains(t, err.Error(), "is a replica")
	assert.Contains(t, err.Error(), "sentinel:")

	ok, err = check(s.Master().Addr())
	assert.True(t, ok)
	assert.NoError(t, err)

	ok, err = check("127.0.0.1:1")
	assert.False(t, ok, "nothing listens on port 1")
	assert.NoError(t, err)
}

// Health names the client, its mode and the cause while the breaker is
// open, and nothing once Redis answers again.
func TestHealthSaysWhy(t *testing.T) {
	srv := redistest.New(t)
	c, err := NewURL(srv.URL(), "", Options{Name: "shared", CommandTimeout: 50 * time.Millisecond, BreakerOpen: 50 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())
	assert.Empty(t, c.Health())
	srv.Stop()
	for range DefaultBreakerFailures {
		require.Error(t, c.Ping(ctx).Err())
	}
	h := c.Health()
	assert.True(t, strings.HasPrefix(h, "Redis (shared, single) unavailable, breaker open"), h)
	assert.Contains(t, h, "connection refused")
	srv.Restart()
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	assert.Empty(t, c.Health())
}

func TestKindOf(t *testing.T) {
	for msg, want := range map[string]string{
		"READONLY You can't write against a read only replica.": KindReadOnly,
		"LOADING Redis is loading the dataset in memory":        KindLoading,
		"CLUSTERDOWN The cluster is down":                       KindClusterDown,
		"MOVED 3999 127.0.0.1:6381":                             KindMoved,
		"ASK 3999 127.0.0.1:6381":                               KindAsk,
		"CROSSSLOT Keys in request don't hash to the same slot": KindCrossSlot,
		"TRYAGAIN Multiple keys request during rehashing":       KindTryAgain,
		"MASTERDOWN Link with MASTER is down":                   KindMasterDown,
		"WRONGTYPE Operation against a key":                     KindReply,
	} {
		err := replyError(msg)
		assert.Equal(t, want, kindOf(err), msg)
		assert.Equal(t, want != KindReply && want != KindCrossSlot, !answered(err), msg)
	}
	assert.Equal(t, KindCircuitOpen, kindOf(errOpenState))
	assert.Equal(t, KindTimeout, kindOf(context.DeadlineExceeded))
	assert.Equal(t, KindOther, kindOf(errors.New("x")))
}

// replyError is an error reply of Redis, as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}
