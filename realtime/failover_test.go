package realtime

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
	"streamgate/internal/testing/fleet"
	"streamgate/internal/testing/redistest"
	"streamgate/realtime/share"
	"streamgate/redisconn"
	"streamgate/upstreamsim"
)

// shareKey is a key of mainnet's sharing: its slot is the network's.
const shareKey = share.DefaultPrefix + "{mainnet}:wants"

// redisClient is the process's Redis client for target, as the server
// builds it (deadline and circuit breaker included).
func redisClient(t *testing.T, target redisconn.Target) *redisconn.Client {
	t.Helper()
	c, err := redisconn.New(target, redisconn.Options{})
	require.NoError(t, err)
	return c
}

// sharingHubs starts three sharing hubs on e whose Redis clients come
// from client (one per hub, as three processes have), each with a
// subscription to feeds and its gaps filled from REST (counted in calls),
// runs the upstream's clock ten seconds a second, and returns once they
// share one upstream connection and deliver.
func sharingHubs(t *testing.T, e *env, feeds []feedid.ID, calls *atomic.Int64, client func() redis.UniversalClient) ([]*Hub, []*collector, []*prometheus.Registry) {
	t.Helper()
	hubs := make([]*Hub, 3)
	cols := make([]*collector, 3)
	regs := make([]*prometheus.Registry, 3)
	for i := range hubs {
		c := client()
		t.Cleanup(func() { c.Close() })
		regs[i] = prometheus.NewRegistry()
		hubs[i] = e.hub(t, func(cfg *Config) {
			cfg.Metrics = NewMetrics(regs[i])
			cfg.Share = &share.Config{Client: c, Lease: shareLease, Replica: "r" + strconv.Itoa(i)}
			cfg.Backfill, cfg.BackfillMax = e.restBackfill(calls), 10*time.Minute
		})
		cols[i] = collect(t, subscribe(t, hubs[i], feeds, SubscribeOptions{Queue: 4096}))
	}
	e.run(t, 100*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	awaitMore(t, cols, feeds[0], 3)
	return hubs, cols, regs
}

// counter returns the value of the counter name of reg whose labels are
// labels (name, value, …); 0 when there is none.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// failoverRun is what a failover cost three sharing replicas.
type failoverRun struct {
	failover   time.Duration // from the kill until Redis had a master again
	recovery   time.Duration // from then until the replicas shared one connection again
	peak       int64         // upstream connections open at most meanwhile
	opened     int64         // upstream connections opened meanwhile
	resubs     int64         // subscriptions made again by the receivers
	fallbacks  int64         // times a replica stopped sharing
	restarts   int           // replicas that had to be restarted (always 0: none is)
	backfilled int64         // calls to fill gaps from REST
}

// shareThroughFailover starts three sharing hubs whose Redis clients come
// from client (one per hub, as three processes have), each with a
// subscription to two feeds and gaps filled from REST; once they share
// one upstream connection, kill ends Redis's master and returns when Redis
// has a new one (and how long that took). It waits until the hubs share
// one connection again, then checks that every subscription got every
// second of every feed once, in order, throughout.
func shareThroughFailover(t *testing.T, client func() redis.UniversalClient, kill func() time.Duration) failoverRun {
	e := newEnv(t, nil)
	feeds := e.crypto(t, 2)
	var calls atomic.Int64
	hubs, cols, _ := sharingHubs(t, e, feeds, &calls, client)

	// The upstream connections open, sampled until the end.
	var peak atomic.Int64
	defer fleet.SamplePeak(&peak, e.open)()

	accepted := e.sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted
	var run failoverRun
	run.failover = kill()
	end := time.Now()
	require.Eventually(t, func() bool { return settled(e, hubs) }, 4*wait, 10*time.Millisecond,
		"the replicas share one upstream connection again, none restarted")
	run.recovery = time.Since(end)
	awaitMore(t, cols, feeds[0], 10)
	awaitMore(t, cols, feeds[1], 10)
	run.peak = peak.Load()
	run.opened = e.sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted - accepted
	run.backfilled = calls.Load()
	for _, h := range hubs {
		st := h.Stats().Share
		run.resubs += st.Resubscribed
		run.fallbacks += st.Fallbacks
	}
	for i, c := range cols {
		select {
		case <-c.done:
			t.Fatalf("the subscription of replica %d ended", i)
		default:
		}
		for _, f := range feeds {
			consecutive(t, c.of(f))
		}
	}
	t.Logf("failover %v; shared again %v after it; upstream connections: %d at most, %d opened meanwhile, %d after; "+
		"subscriptions made again %d; fallbacks %d; gap fills %d; replicas restarted %d",
		run.failover.Round(time.Millisecond), run.recovery.Round(time.Millisecond), run.peak, run.opened, e.open(),
		run.resubs, run.fallbacks, run.backfilled, run.restarts)
	return run
}

// Redis Cluster (three masters, one replica each): the master of the
// network's slot is SIGKILLed while three replicas share one upstream
// connection and stream. Its replica takes over, every replica finds it
// (the commands and the shard channel's subscription), and they share one
// connection again; every subscription gets every second once, in order.
func TestShareClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis Cluster failover: not with -short")
	}
	cl := redistest.NewCluster(t)
	shareThroughFailover(t, func() redis.UniversalClient {
		return redisClient(t, redisconn.Target{Cluster: cl.Addrs()})
	}, func() time.Duration {
		killed := cl.KillMaster(shareKey)
		return cl.WaitFailover(killed)
	})
}

// Redis Sentinel (a master, a replica, three sentinels): the master is
// SIGKILLed while three replicas share one upstream connection and
// stream. The sentinels promote the replica, every replica's client
// follows, and they share one connection again; every subscription gets
// every second once, in order.
func TestShareSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis Sentinel failover: not with -short")
	}
	sn := redistest.NewSentinel(t)
	shareThroughFailover(t, func() redis.UniversalClient {
		return redisClient(t, redisconn.Target{Sentinel: &redisconn.Sentinel{Master: redistest.SentinelMaster, Addrs: sn.Addrs()}})
	}, func() time.Duration {
		_, took := sn.WaitFailover(sn.KillMaster())
		return took
	})
}

// moveSlot moves key's slot from the master that serves it to another one
// (CLUSTER SETSLOT IMPORTING / MIGRATING, MIGRATE of its keys, SETSLOT
// NODE on every master), as an operator's resharding does, and returns
// when every master names the new owner.
func moveSlot(t *testing.T, cl *redistest.Cluster, key string) {
	t.Helper()
	ctx := context.Background()
	slot := redistest.Slot(key)
	src := cl.MasterFor(key)
	var dst *redistest.Server
	for _, m := range cl.Masters() {
		if m != src {
			dst = m
			break
		}
	}
	require.NotNil(t, dst)
	node := func(s *redistest.Server) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return c
	}
	sc, dc := node(src), node(dst)
	srcID, err := sc.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	dstID, err := dc.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, dc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	require.NoError(t, sc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, err := net.SplitHostPort(dst.Addr())
	require.NoError(t, err)
	for {
		keys, err := sc.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		require.NoError(t, err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		require.NoError(t, sc.Do(ctx, args...).Err())
	}
	for _, m := range cl.Masters() {
		require.NoError(t, node(m).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	require.Eventually(t, func() bool { return cl.MasterFor(key) == dst }, wait, 10*time.Millisecond)
}

// The network's slot moves to another master (a resharding) while three
// replicas share one upstream connection: the old owner ends the shard
// channel's subscriptions (SUNSUBSCRIBE), each replica subscribes again on
// the new owner, and they go on sharing one connection; every subscription
// gets every second once, in order.
func TestShareClusterSlotMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis Cluster resharding: not with -short")
	}
	cl := redistest.NewCluster(t)
	e := newEnv(t, nil)
	feeds := e.crypto(t, 2)
	var calls atomic.Int64
	hubs, cols, regs := sharingHubs(t, e, feeds, &calls, func() redis.UniversalClient {
		return redisClient(t, redisconn.Target{Cluster: cl.Addrs()})
	})

	moveSlot(t, cl, shareKey)
	require.Eventually(t, func() bool {
		for _, reg := range regs {
			if counter(t, reg, "streamgate_ws_share_resubscribed_total", "network", "mainnet", "reason", "ended") < 1 {
				return false
			}
		}
		return true
	}, wait, 10*time.Millisecond, "every replica's subscription ended by the old owner and made again")
	received := make([]int64, len(hubs))
	for i, h := range hubs {
		received[i] = h.Stats().Share.Received
	}
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	awaitMore(t, cols, feeds[0], 10)
	require.True(t, settled(e, hubs), "one upstream connection")
	holder := holders(hubs)[0]
	for i, h := range hubs {
		if i != holder {
			require.Greater(t, h.Stats().Share.Received, received[i], "follower %d receives on the new owner", i)
		}
	}
	for _, c := range cols {
		for _, f := range feeds {
			consecutive(t, c.of(f))
		}
	}
}
