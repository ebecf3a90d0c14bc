package realtime

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"streamgate/internal/redistest"
	"streamgate/simulator"
)

// shareKey is a key of mainnet's sharing: its slot is the network's.
const shareKey = DefaultSharePrefix + "{mainnet}:wants"

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
	hubs := make([]*Hub, 3)
	cols := make([]*collector, 3)
	for i := range hubs {
		c := client()
		t.Cleanup(func() { c.Close() })
		hubs[i] = e.hub(t, func(cfg *Config) {
			cfg.Share = &ShareConfig{Client: c, Lease: shareLease, Replica: "r" + strconv.Itoa(i)}
			cfg.Backfill, cfg.BackfillMax = e.restBackfill(&calls), 10*time.Minute
		})
		cols[i] = collect(t, hubs[i].Subscribe(feeds, 4096))
	}
	e.run(t, 100*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	awaitMore(t, cols, feeds[0], 3)

	// The upstream connections open, sampled until the end.
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			if n := e.open(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	accepted := e.sim.Counters().WSTotal(simulator.Mainnet).Accepted
	var run failoverRun
	run.failover = kill()
	end := time.Now()
	require.Eventually(t, func() bool { return settled(e, hubs) }, 4*wait, 10*time.Millisecond,
		"the replicas share one upstream connection again, none restarted")
	run.recovery = time.Since(end)
	awaitMore(t, cols, feeds[0], 10)
	awaitMore(t, cols, feeds[1], 10)
	run.peak = peak.Load()
	run.opened = e.sim.Counters().WSTotal(simulator.Mainnet).Accepted - accepted
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
	t.Logf("failover %v; shared again %v after it; upstream connections: %d at most, %d opened meanwhile, 1 after; "+
		"subscriptions made again %d; fallbacks %d; gap fills %d; replicas restarted %d",
		run.failover.Round(time.Millisecond), run.recovery.Round(time.Millisecond), run.peak, run.opened,
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
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
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
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: sn.Addrs(),
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	}, func() time.Duration {
		_, took := sn.WaitFailover(sn.KillMaster())
		return took
	})
}
