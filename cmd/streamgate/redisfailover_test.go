package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
)

// shareKey is a key of mainnet's stream sharing: the master that serves
// its slot serves the network's sharing.
const shareKey = "streamgate:ws:v2:{mainnet}:wants"

// TestStreamingRedisFailover: three replicas behind the balancer share
// their limits and their upstream WebSocket connections through a Redis
// Sentinel set (master, replica, three sentinels) or a Redis Cluster
// (three masters, one replica each), with plain and HA clients streaming
// three streams. Shown, on each:
//
//   - the three replicas hold the upstream connections of one (one per
//     upstream origin), however many replicas there are;
//   - the Redis master (the cluster master of the network's slot) is
//     SIGKILLed while the clients stream: every client gets every second
//     once (plain) or at least once (HA), no replica is restarted, and the
//     replicas share one set of connections again; the time from the
//     failover's end until then and the upstream connections meanwhile are
//     logged;
//   - a replica is replaced (SIGTERM) after the failover: its clients
//     resume on the others, every second once.
func TestStreamingRedisFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process Redis failover test: not with -short")
	}
	t.Run("sentinel", func(t *testing.T) {
		sn := redistest.NewSentinel(t)
		block := fmt.Sprintf("{sentinel: {master: %s, addrs: [%s]}}", redistest.SentinelMaster, strings.Join(sn.Addrs(), ", "))
		streamingRedisFailover(t, block, func() time.Duration {
			_, took := sn.WaitFailover(sn.KillMaster())
			return took
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t)
		block := fmt.Sprintf("{cluster: {addrs: [%s]}}", strings.Join(cl.Addrs(), ", "))
		streamingRedisFailover(t, block, func() time.Duration {
			return cl.WaitFailover(cl.KillMaster(shareKey))
		})
	})
}

// streamingRedisFailover runs TestStreamingRedisFailover on the Redis that
// block (ratelimit.redis in YAML flow style) names; kill SIGKILLs its
// master and returns, with its duration, when the failover is over.
func streamingRedisFailover(t *testing.T, block string, kill func() time.Duration) {
	c := startFleet(t, 3, func(upstream string) string {
		cfg := continuityConfig(upstream, "redis://unused")
		return strings.Replace(cfg, `redis: {url: "redis://unused"}`, "redis: "+block, 1)
	})
	feeds := feedIDs(t, c.Replica(0).Net["mainnet"], 3)
	var phase atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	clients := c.streamClients(ctx, &wg, feeds, &phase)

	// One upstream connection per origin for the whole fleet: the three
	// streams fit one connection, the upstream has two origins.
	const shared = 2
	require.Eventually(t, func() bool { return c.sharing() && c.UpstreamOpen() == shared }, 30*time.Second, 100*time.Millisecond,
		"the replicas share %d upstream connections", shared)

	c.runScenarios(feeds, clients, &phase, func() { cancel(); wg.Wait() }, []scenario{
		{"Redis master SIGKILLed", func() {
			var peak atomic.Int64
			stop := c.SampleUpstream(&peak)
			before429 := c.Refused()
			took := kill()
			end := time.Now()
			var after time.Duration
			require.Eventually(t, func() bool {
				after = time.Since(end)
				return c.sharing() && c.UpstreamOpen() == shared
			}, 60*time.Second, 50*time.Millisecond, "the replicas share again, none restarted")
			stop()
			for i, p := range c.Replicas() {
				assert.False(t, p.Done(), "replica %d exited", i)
			}
			t.Logf("failover %v; every replica shares again %v after its end; upstream connections: %d before, %d at most meanwhile, %d after; replicas restarted 0",
				took.Round(time.Millisecond), after.Round(10*time.Millisecond), shared, peak.Load(), c.UpstreamOpen())
			refused := c.Refused()
			for e := range before429 {
				refused[e] -= before429[e]
			}
			t.Logf("gaps: seconds filled from REST %v, unfilled %v per replica; upstream 429s by endpoint %v",
				c.perReplica("streamgate_ws_backfilled_seconds_total"), c.perReplica("streamgate_ws_gaps_unfilled_total"), refused)
		}, false},
		{"a replica replaced after the failover (its clients resume on the others)", func() {
			resumed := c.resumed()
			c.replace(0, syscall.SIGTERM)
			require.Eventually(t, func() bool { return c.resumed() > resumed }, 30*time.Second, 100*time.Millisecond,
				"clients resumed on another replica")
		}, false},
	})
}

// sharing reports whether every replica shares mainnet's upstream
// connections through Redis.
func (c *cluster) sharing() bool {
	ok, err := c.Sharing()
	assert.NoError(c.t, err)
	return ok
}

// perReplica is the sum of the metric family name on each replica.
func (c *cluster) perReplica(name string) []float64 {
	v, err := c.PerReplica(name)
	assert.NoError(c.t, err)
	return v
}

// resumed is the number of client subscriptions resumed on the replicas.
func (c *cluster) resumed() float64 {
	n := 0.0
	for _, v := range c.perReplica("streamgate_ws_resumed_total") {
		n += v
	}
	return n
}
