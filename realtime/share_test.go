package realtime

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
	"streamgate/realtime/share"
	"streamgate/redisconn"
	"streamgate/upstreamsim"
)

// shareLease is the tests' lease: ticks 300ms apart.
const shareLease = 900 * time.Millisecond

// replicas starts n sharing hubs on e, each with a Redis client of its
// own (as n processes would have) on rs, and a subscription of each to
// feeds.
func replicas(t testing.TB, e *env, rs *redistest.Server, n int, feeds []feedid.ID) ([]*Hub, []*collector, []*redisconn.Client) {
	t.Helper()
	hubs := make([]*Hub, n)
	cols := make([]*collector, n)
	clients := make([]*redisconn.Client, n)
	for i := range hubs {
		c, err := redisconn.NewURL(rs.URL(), "", redisconn.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		clients[i] = c
		hubs[i] = e.hub(t, func(cfg *Config) {
			cfg.Share = &share.Config{Client: c, Lease: shareLease, Replica: "r" + strconv.Itoa(i)}
		})
		cols[i] = collect(t, subscribe(t, hubs[i], feeds, SubscribeOptions{}))
	}
	return hubs, cols, clients
}

// holders returns the indexes of the hubs that hold a chunk.
func holders(hubs []*Hub) []int {
	var out []int
	for i, h := range hubs {
		if st := h.Stats(); st.Share != nil && st.Share.Held > 0 {
			out = append(out, i)
		}
	}
	return out
}

// settled reports whether one hub holds the one chunk with one upstream
// connection and the others follow with none.
func settled(e *env, hubs []*Hub) bool {
	hs := holders(hubs)
	if len(hs) != 1 || e.open() != 1 {
		return false
	}
	for i, h := range hubs {
		st := h.Stats()
		if !st.Share.Sharing || (i != hs[0] && len(st.Connections) != 0) {
			return false
		}
	}
	return true
}

// oneConnection checks a sustained period on one upstream connection: n
// more reports of each feed at every collector, no upstream connection
// opened meanwhile, and every collector's frames in order, each second
// once.
func oneConnection(t *testing.T, e *env, cols []*collector, feeds []feedid.ID, n int) {
	t.Helper()
	accepted := e.sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted
	from := counts(cols, feeds)
	awaitEach(t, cols, feeds, from, n)
	assert.Equal(t, accepted, e.sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted, "no upstream connection opened meanwhile")
	assert.Equal(t, int64(1), e.open())
	for i, c := range cols {
		for _, f := range feeds {
			fs := c.of(f)
			increasing(t, fs)
			consecutive(t, fs[max(from[i][f]-1, 0):])
		}
	}
}

// Three replicas wanting the same feeds: the upstream sees one
// connection, and every subscription on every replica gets every report,
// in order, once; a follower answers Latest from the holder's frames.
func TestShareOneConnection(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 3)
	hubs, cols, _ := replicas(t, e, rs, 3, feeds)
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)

	// A sustained period: 40 reports of each feed on every replica.
	oneConnection(t, e, cols, feeds, 40)
	holder := holders(hubs)[0]
	for i, h := range hubs {
		st := h.Stats().Share
		if i == holder {
			assert.Positive(t, st.Published, "the holder publishes")
			continue
		}
		assert.Positive(t, st.Received, "follower %d receives through Redis", i)
		frame, ts, ok := h.Latest(feeds[0])
		require.True(t, ok, "follower %d answers latest from the stream", i)
		assert.Equal(t, string(e.rest(t, feeds[0], ts)), string(frame), "the upstream's bytes")
	}
}

// The holder closes: it hands its chunk over (its lease let go, its
// connection kept until another replica's delivers), and the
// subscriptions of the others carry on without a gap or a duplicate.
func TestShareHolderCloses(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	hubs, cols, _ := replicas(t, e, rs, 3, feeds)
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		for _, c := range cols {
			for _, f := range feeds {
				if c.count(f) < 10 {
					return false
				}
			}
		}
		return true
	}, wait, 10*time.Millisecond, "the stream flows to every replica")
	old := holders(hubs)[0]
	rest := append(append([]*Hub{}, hubs[:old]...), hubs[old+1:]...)
	restCols := append(append([]*collector{}, cols[:old]...), cols[old+1:]...)
	from := counts(restCols, feeds)
	hubs[old].Close()
	require.Eventually(t, func() bool { return settled(e, rest) }, wait, 10*time.Millisecond)
	awaitEach(t, restCols, feeds, from, 20)
	for i, c := range restCols {
		select {
		case <-c.done:
			t.Fatal("a subscription of a follower ended")
		default:
		}
		for _, f := range feeds {
			increasing(t, c.of(f))
			consecutive(t, c.of(f)[max(from[i][f]-1, 0):])
		}
	}
}

// The holder dies without a word (its Redis client gone, then closed):
// its lease expires, another replica takes the chunk over, and the
// subscriptions of the others carry on, without a duplicate.
func TestShareHolderCrashes(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	hubs, cols, clients := replicas(t, e, rs, 3, feeds)
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	old := holders(hubs)[0]
	clients[old].Close()
	hubs[old].Close()
	rest := append(append([]*Hub{}, hubs[:old]...), hubs[old+1:]...)
	restCols := append(append([]*collector{}, cols[:old]...), cols[old+1:]...)
	n := []int{restCols[0].count(feeds[0]), restCols[1].count(feeds[0])}
	require.Eventually(t, func() bool { return settled(e, rest) }, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return restCols[0].count(feeds[0]) >= n[0]+20 && restCols[1].count(feeds[0]) >= n[1]+20
	}, wait, 10*time.Millisecond)
	for _, c := range restCols {
		select {
		case <-c.done:
			t.Fatal("a subscription of a follower ended")
		default:
		}
		for _, f := range feeds {
			increasing(t, c.of(f))
		}
	}
}

// The holder loses Redis (its client closed): it holds its own connection,
// its lease expires and another replica takes the chunk over.
func TestShareHolderLosesRedis(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	hubs, cols, clients := replicas(t, e, rs, 3, feeds)
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	old := holders(hubs)[0]
	clients[old].Close()
	rest := append(append([]*Hub{}, hubs[:old]...), hubs[old+1:]...)
	require.Eventually(t, func() bool {
		return !hubs[old].Stats().Share.Sharing && len(holders(rest)) == 1
	}, wait, 10*time.Millisecond)
	awaitMore(t, cols, feeds[1], 20)
	// Two connections: the isolated replica's own and the new holder's.
	require.Eventually(t, func() bool { return e.open() == 2 }, wait, 10*time.Millisecond)
	for _, c := range cols {
		for _, f := range feeds {
			increasing(t, c.of(f))
		}
	}
	assert.Positive(t, hubs[old].Stats().Share.Fallbacks)
}

// Redis hangs: every replica falls back to its own connection and the
// subscriptions keep receiving; once Redis answers again they share one
// connection again.
func TestShareRedisPaused(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	hubs, cols, _ := replicas(t, e, rs, 3, feeds)
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)

	rs.Pause()
	paused := true
	defer func() {
		if paused {
			rs.Resume()
		}
	}()
	require.Eventually(t, func() bool {
		for _, h := range hubs {
			if h.Stats().Share.Sharing {
				return false
			}
		}
		return e.open() == 3
	}, wait, 10*time.Millisecond)
	counts := awaitMore(t, cols, feeds[0], 20)
	for i, c := range cols {
		consecutive(t, c.of(feeds[0])[counts[i]:])
	}

	rs.Resume()
	paused = false
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	counts = awaitMore(t, cols, feeds[0], 20)
	for _, c := range cols {
		for _, f := range feeds {
			increasing(t, c.of(f))
		}
		select {
		case <-c.done:
			t.Fatal("a subscription ended")
		default:
		}
	}
	for _, h := range hubs {
		assert.Positive(t, h.Stats().Share.Fallbacks)
	}
}

// A follower answers Latest from the holder's frames only while the
// holder's connection that delivered the report stays up.
func TestShareLatestFollowsTheHolder(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	a := e.crypto(t, 1)[0]
	hubs, cols, _ := replicas(t, e, rs, 3, []feedid.ID{a})
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	holder := holders(hubs)[0]
	follower := (holder + 1) % len(hubs)
	_, _, ok := hubs[follower].Latest(a)
	assert.False(t, ok, "no frame yet")

	e.clk.Advance(time.Second)
	require.Eventually(t, func() bool { return cols[follower].count(a) == 1 }, wait, 5*time.Millisecond)
	frame, ts, ok := hubs[follower].Latest(a)
	require.True(t, ok)
	assert.Equal(t, string(e.rest(t, a, ts)), string(frame))

	e.sim.DropWS(simulatorDrop())
	require.Eventually(t, func() bool { _, _, ok := hubs[follower].Latest(a); return !ok }, wait, 5*time.Millisecond,
		"the holder's connection ended")
	require.Eventually(t, func() bool { return hubs[holder].Stats().Up() == 1 }, wait, 5*time.Millisecond)
	_, _, ok = hubs[follower].Latest(a)
	assert.False(t, ok, "the holder's new connection has delivered nothing yet")
	e.clk.Advance(time.Second)
	require.Eventually(t, func() bool { _, _, ok := hubs[follower].Latest(a); return ok }, wait, 5*time.Millisecond)
	assert.Equal(t, 2, cols[follower].count(a))
}

// Replicas wanting different feeds: the holder carries the union (the
// feeds of every replica's subscriptions and REST demand) on one
// connection, and each replica gets the reports of its own feeds.
func TestShareUnionOfWants(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	fs := e.crypto(t, 4)
	a, b, c, d := fs[0], fs[1], fs[2], fs[3]
	hubs, _, _ := replicas(t, e, rs, 3, nil)
	cols := []*collector{
		collect(t, subscribe(t, hubs[0], []feedid.ID{a}, SubscribeOptions{})),
		collect(t, subscribe(t, hubs[1], []feedid.ID{b}, SubscribeOptions{})),
		collect(t, subscribe(t, hubs[2], []feedid.ID{a, c}, SubscribeOptions{})),
	}
	for range DemandThreshold {
		hubs[1].Want(d) // latest polled on replica 1: streamed
	}
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		hubs[1].Want(d) // polled still
		if !settled(e, hubs) {
			return false
		}
		_, _, ok := hubs[1].Latest(d)
		return ok && cols[0].count(a) >= 20 && cols[1].count(b) >= 20 && cols[2].count(a) >= 20 && cols[2].count(c) >= 20
	}, wait, 10*time.Millisecond)
	holder := hubs[holders(hubs)[0]]
	assert.Equal(t, 4, holder.Stats().FeedsSubscribed, "the union of the wants on one connection")
	assert.Zero(t, cols[0].count(b)+cols[0].count(c)+cols[1].count(a)+cols[1].count(c)+cols[2].count(b), "each its own feeds")
	for _, col := range cols {
		for _, f := range fs {
			increasing(t, col.of(f))
		}
	}
}

// With two HA origins the holder holds a connection per origin and the
// followers get every report once.
func TestShareHighAvailability(t *testing.T) {
	e := newEnv(t, func(c *simulatorConfig) { c.HAOrigins = []string{"001", "002"} })
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	hubs, cols, _ := replicas(t, e, rs, 3, feeds)
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		hs := holders(hubs)
		if len(hs) != 1 || e.open() != 2 {
			return false
		}
		for _, c := range cols {
			for _, f := range feeds {
				if c.count(f) < 20 {
					return false
				}
			}
		}
		return true
	}, wait, 10*time.Millisecond)
	for i, h := range hubs {
		if i != holders(hubs)[0] {
			assert.Empty(t, h.Stats().Connections, "follower %d holds no connection", i)
		}
	}
	for _, c := range cols {
		for _, f := range feeds {
			increasing(t, c.of(f))
		}
	}
}

// Sharing hubs refuse a consumer by the union of every replica's wants:
// one replica's subscriptions fill the layout, and another refuses a feed
// it cannot carry (ErrNoRoom, nothing subscribed) but admits one carried;
// a feed just admitted, not yet in the union, counts too.
func TestShareSubscribeWithin(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	fs := e.crypto(t, 4)
	hubs := make([]*Hub, 2)
	for i := range hubs {
		c, err := redisconn.NewURL(rs.URL(), "", redisconn.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		hubs[i] = e.hub(t, func(cfg *Config) {
			cfg.MaxConnections, cfg.FeedsPerConnection = 1, 3
			cfg.Share = &share.Config{Client: c, Lease: shareLease, Replica: "r" + strconv.Itoa(i)}
		})
	}
	e.run(t, 20*time.Millisecond)
	col := collect(t, subscribe(t, hubs[0], fs[:2], SubscribeOptions{}))
	require.Eventually(t, func() bool {
		st := hubs[1].Stats().Share
		return st.Sharing && st.Union == 2 && st.UnionCapacity == 3 && col.count(fs[0]) > 0
	}, wait, 10*time.Millisecond)

	sub, err := hubs[1].Subscribe(fs[2:3], SubscribeOptions{Within: true})
	require.NoError(t, err, "room for one more in the union")
	defer sub.Close()
	_, err = hubs[1].Subscribe(fs[3:4], SubscribeOptions{Within: true})
	require.ErrorIs(t, err, ErrNoRoom, "the feed just admitted counts, whether or not a tick has published it")
	assert.Equal(t, 1, hubs[1].Stats().Subscribers, "nothing subscribed for the refused consumer")
	carried, err := hubs[1].Subscribe(fs[:1], SubscribeOptions{Within: true})
	require.NoError(t, err, "a feed the union carries is admitted")
	defer carried.Close()
	got := collect(t, carried)
	require.Eventually(t, func() bool { return got.count(fs[0]) > 0 }, wait, 10*time.Millisecond)
}
