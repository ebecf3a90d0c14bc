package realtime

import (
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/feedid"
	"streamgate/upstreamsim"
)

// Many subscriptions over a few feeds share one upstream connection and
// each gets its feeds' frames, the upstream's bytes, once, in order.
func TestFanOutSharesConnections(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	feeds := e.crypto(t, 3)
	var cs []*collector
	for i := range 60 {
		sub := []feedid.ID{feeds[i%3]}
		if i%2 == 0 {
			sub = append(sub, feeds[(i+1)%3])
		}
		cs = append(cs, collect(t, subscribe(t, h, sub, SubscribeOptions{})))
	}
	e.run(t, 30*time.Millisecond)
	for i, c := range cs {
		require.Eventually(t, func() bool { return c.count(feeds[i%3]) >= 8 }, wait, 5*time.Millisecond, "subscriber %d", i)
	}
	assert.LessOrEqual(t, e.open(), int64(2))
	assert.Equal(t, 1, h.Stats().Up())
	for i, c := range cs {
		for j, f := range feeds {
			fs := c.of(f)
			wanted := j == i%3 || (i%2 == 0 && j == (i+1)%3)
			if !wanted {
				assert.Empty(t, fs, "subscriber %d got a feed it did not ask for", i)
				continue
			}
			consecutive(t, fs)
		}
	}
	// Byte for byte the REST answer of that second.
	for _, fr := range cs[0].of(feeds[0])[:3] {
		assert.Equal(t, string(e.rest(t, fr.feed, fr.ts)), string(fr.data))
	}
	st := h.Stats()
	assert.Equal(t, 3, st.FeedsSubscribed)
	assert.Equal(t, 60, st.Subscribers)
	assert.Greater(t, st.FramesOut, st.FramesIn)
}

// Adding and dropping a feed switches the chunk make-before-break: the
// subscribers of another feed see neither a gap nor a duplicate.
func TestMakeBeforeBreak(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	feeds := e.crypto(t, 2)
	a, b := feeds[0], feeds[1]
	ca := collect(t, subscribe(t, h, []feedid.ID{a}, SubscribeOptions{}))
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool { return ca.count(a) >= 5 }, wait, 5*time.Millisecond)

	cb := collect(t, subscribe(t, h, []feedid.ID{b}, SubscribeOptions{}))
	require.Eventually(t, func() bool { return cb.count(b) >= 5 }, wait, 5*time.Millisecond)
	n := ca.count(a)
	require.Eventually(t, func() bool { return ca.count(a) >= n+5 }, wait, 5*time.Millisecond)
	require.Eventually(t, func() bool { return e.open() == 1 }, wait, 5*time.Millisecond, "the old connection closed")

	cb.sub.Close()
	// After the grace, the chunk carries A alone again.
	require.Eventually(t, func() bool {
		st := h.Stats()
		return st.FeedsSubscribed == 1 && len(st.Connections) == 1 && st.Connections[0].Feeds == 1 && e.open() == 1
	}, wait, 5*time.Millisecond)
	n = ca.count(a)
	require.Eventually(t, func() bool { return ca.count(a) >= n+5 }, wait, 5*time.Millisecond)
	consecutive(t, ca.of(a))
	_, _, ok := h.Latest(b)
	assert.False(t, ok, "a dropped feed is not streamed")
	assert.GreaterOrEqual(t, e.sim.Counters().WSTotal("mainnet").Accepted, int64(3))
}

// Dropped and stalled upstream connections are replaced; subscriptions
// stay open and see no duplicate.
func TestDropAndStall(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	a := e.crypto(t, 1)[0]
	c := collect(t, subscribe(t, h, []feedid.ID{a}, SubscribeOptions{}))
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool { return c.count(a) >= 5 }, wait, 5*time.Millisecond)

	require.Equal(t, 1, e.sim.DropWS(simulatorDrop()))
	require.Eventually(t, func() bool { return h.Stats().Reconnects[reasonDrop] == 1 }, wait, 5*time.Millisecond)
	n := c.count(a)
	require.Eventually(t, func() bool { return c.count(a) >= n+5 }, wait, 5*time.Millisecond)

	require.NoError(t, e.sim.SetFaults(stall(true)))
	require.Eventually(t, func() bool { return h.Stats().Reconnects[reasonStall] >= 1 }, wait, 5*time.Millisecond)
	require.NoError(t, e.sim.SetFaults(stall(false)))
	n = c.count(a)
	require.Eventually(t, func() bool { return c.count(a) >= n+5 }, wait, 5*time.Millisecond)

	select {
	case <-c.done:
		t.Fatal("the subscription ended")
	default:
	}
	increasing(t, c.of(a))
	assert.Equal(t, 1, h.Stats().Subscribers)
}

// A refused upgrade is retried with backoff.
func TestRefusedUpgradeRetried(t *testing.T) {
	e := newEnv(t, nil)
	require.NoError(t, e.sim.SetFaults(refuse(503)))
	h := e.hub(t, nil)
	a := e.crypto(t, 1)[0]
	c := collect(t, subscribe(t, h, []feedid.ID{a}, SubscribeOptions{}))
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool { return h.Stats().Reconnects[reasonRefused] >= 2 }, wait, 5*time.Millisecond)
	require.NoError(t, e.sim.SetFaults(refuse(0)))
	require.Eventually(t, func() bool { return c.count(a) >= 3 }, wait, 5*time.Millisecond)
	consecutive(t, c.of(a))
}

// A subscriber that never reads is closed; the others get everything.
func TestSlowConsumer(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	a := e.crypto(t, 1)[0]
	fast := collect(t, subscribe(t, h, []feedid.ID{a}, SubscribeOptions{}))
	slow := subscribe(t, h, []feedid.ID{a}, SubscribeOptions{Queue: 1})
	t.Cleanup(slow.Close)
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool { return h.Stats().SlowCloses == 1 }, wait, 5*time.Millisecond)
	n := 0
	for range slow.C() {
		n++
	}
	assert.LessOrEqual(t, n, 1)
	assert.ErrorIs(t, slow.Err(), ErrSlowConsumer)
	require.Eventually(t, func() bool { return fast.count(a) >= 10 }, wait, 5*time.Millisecond)
	consecutive(t, fast.of(a))
	assert.Equal(t, 1, h.Stats().Subscribers)
	slow.Close() // idempotent after the overflow
	assert.ErrorIs(t, slow.Err(), ErrSlowConsumer)
}

// With two HA origins a chunk has two connections and every report is
// delivered once.
func TestHighAvailability(t *testing.T) {
	e := newEnv(t, func(c *simulatorConfig) { c.HAOrigins = []string{"001", "002"} })
	h := e.hub(t, nil)
	feeds := e.crypto(t, 2)
	c := collect(t, subscribe(t, h, feeds, SubscribeOptions{}))
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool { return c.count(feeds[0]) >= 10 && c.count(feeds[1]) >= 10 }, wait, 5*time.Millisecond)
	assert.Equal(t, int64(2), e.open())
	st := h.Stats()
	require.Len(t, st.Connections, 2)
	assert.Equal(t, "001", st.Connections[0].Origin)
	assert.Equal(t, "002", st.Connections[1].Origin)
	assert.Positive(t, st.Duplicates)
	for _, f := range feeds {
		consecutive(t, c.of(f))
	}
	// One origin lost: the other carries on, without gap.
	e.sim.DropWS(simulatorDropOrigin("001"))
	n := c.count(feeds[0])
	require.Eventually(t, func() bool { return c.count(feeds[0]) >= n+5 }, wait, 5*time.Millisecond)
	consecutive(t, c.of(feeds[0]))
	require.Eventually(t, func() bool { return e.open() == 2 }, wait, 5*time.Millisecond)
}

// Latest is valid after a frame, not after its connection dropped, and
// again once a frame arrived on the new connection.
func TestLatest(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	a := e.crypto(t, 1)[0]
	// latestA is h.Latest(a), counting the answers with ok true: polls
	// until a condition holds see as many as the machine's speed allows.
	var served atomic.Int64
	latestA := func() ([]byte, int64, bool) {
		frame, ts, ok := h.Latest(a)
		if ok {
			served.Add(1)
		}
		return frame, ts, ok
	}
	_, _, ok := latestA()
	assert.False(t, ok, "not streamed")
	c := collect(t, subscribe(t, h, []feedid.ID{a}, SubscribeOptions{}))
	require.Eventually(t, func() bool { return h.Stats().Up() == 1 }, wait, 5*time.Millisecond)
	_, _, ok = latestA()
	assert.False(t, ok, "no frame yet")
	e.clk.Advance(time.Second)
	require.Eventually(t, func() bool { return c.count(a) == 1 }, wait, 5*time.Millisecond)
	frame, ts, ok := latestA()
	require.True(t, ok)
	assert.Equal(t, c.of(a)[0].ts, ts)
	assert.Equal(t, string(e.rest(t, a, ts)), string(frame))

	e.sim.DropWS(simulatorDrop())
	require.Eventually(t, func() bool { _, _, ok := latestA(); return !ok }, wait, 5*time.Millisecond)
	require.Eventually(t, func() bool { return h.Stats().Up() == 1 }, wait, 5*time.Millisecond)
	_, _, ok = latestA()
	assert.False(t, ok, "the new connection has delivered nothing yet")
	e.clk.Advance(time.Second)
	require.Eventually(t, func() bool { _, ts2, ok := latestA(); return ok && ts2 == ts+1 }, wait, 5*time.Millisecond)

	// A new subscriber gets the newest report first.
	c2 := collect(t, subscribe(t, h, []feedid.ID{a}, SubscribeOptions{}))
	require.Eventually(t, func() bool { return c2.count(a) == 1 }, wait, 5*time.Millisecond)
	assert.Equal(t, ts+1, c2.of(a)[0].ts)
	assert.Equal(t, served.Load(), h.Stats().LatestServed, "every answer with ok true counted")
}

// Repeated REST demand subscribes a feed; it is dropped after the grace.
func TestWant(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	a := e.crypto(t, 1)[0]
	e.run(t, 30*time.Millisecond)
	for range DemandThreshold - 1 {
		h.Want(a)
	}
	h.Want("0xnot-a-feed") // Want is synchronous: nothing to wait for
	assert.Equal(t, 0, h.Stats().FeedsWanted, "below the threshold")
	h.Want(a)
	require.Eventually(t, func() bool { _, _, ok := h.Latest(a); return ok }, wait, 5*time.Millisecond)
	assert.Equal(t, 1, h.Stats().FeedsSubscribed)
	// No more demand: dropped after the grace, connection closed.
	require.Eventually(t, func() bool { return h.Stats().FeedsWanted == 0 && e.open() == 0 }, wait, 5*time.Millisecond)
	_, _, ok := h.Latest(a)
	assert.False(t, ok)
}

// More feeds than fit: the budget holds, the rest is counted uncarried.
// Of 3 connections, 2 carry chunks and 1 is kept for a switch.
func TestMaxConnections(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, func(c *Config) { c.MaxConnections = 3; c.FeedsPerConnection = 2 })
	feeds := e.crypto(t, 5)
	c := collect(t, subscribe(t, h, feeds, SubscribeOptions{}))
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool {
		st := h.Stats()
		return st.Up() == 2 && st.FeedsSubscribed == 4 && st.FeedsUncarried == 1
	}, wait, 5*time.Millisecond)
	carried := 0
	require.Eventually(t, func() bool {
		carried = 0
		for _, f := range feeds {
			if c.count(f) >= 3 {
				carried++
			}
		}
		return carried == 4
	}, wait, 5*time.Millisecond)
	assert.Equal(t, int64(2), e.open())
	assert.Equal(t, 5, h.Stats().FeedsWanted)
}

// Pinned feeds are carried without a subscriber; Close ends every
// subscription with ErrHubClosed.
func TestPinnedAndClose(t *testing.T) {
	e := newEnv(t, nil)
	feeds := e.crypto(t, 2)
	h := e.hub(t, func(c *Config) { c.Pinned = feeds[:1] })
	e.run(t, 30*time.Millisecond)
	require.Eventually(t, func() bool { _, _, ok := h.Latest(feeds[0]); return ok }, wait, 5*time.Millisecond)
	sub := subscribe(t, h, feeds, SubscribeOptions{Queue: 4})
	h.Close()
	for range sub.C() {
	}
	assert.ErrorIs(t, sub.Err(), ErrHubClosed)
	require.Eventually(t, func() bool { return e.open() == 0 }, wait, 5*time.Millisecond)
	late := subscribe(t, h, feeds, SubscribeOptions{Queue: 1})
	_, open := <-late.C()
	assert.False(t, open)
	assert.ErrorIs(t, late.Err(), ErrHubClosed)
}

// TestOriginDiscoveryAskedAgain: a hub whose HEAD / is refused (the
// upstream's rate limit, as when replicas start together) starts with one
// connection per chunk, asks again later, and then holds one connection
// per origin, the streams going on without a gap.
func TestOriginDiscoveryAskedAgain(t *testing.T) {
	e := newEnv(t, func(c *simulatorConfig) {
		c.HAOrigins = []string{"001", "002"}
		c.RateLimit, c.Burst = 1, 1 // per second of the env's clock, which stands still for now
	})
	// Another caller takes the one request of this second: the hub's
	// discovery is refused with 429.
	req, err := http.NewRequest(http.MethodHead, e.srv.URL+"/", nil)
	require.NoError(t, err)
	auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), e.clk.Now())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	h := e.hub(t, nil)
	feeds := e.crypto(t, 2)
	c := collect(t, subscribe(t, h, feeds, SubscribeOptions{}))
	require.Eventually(t, func() bool {
		st := h.Stats()
		return len(st.Connections) == 1 && st.Connections[0].Origin == ""
	}, wait, 5*time.Millisecond, "one connection without origins after the refusal")

	e.run(t, 30*time.Millisecond) // the clock moves: the rate allows again
	require.Eventually(t, func() bool {
		st := h.Stats()
		return len(st.Connections) == 2 && st.Connections[0].Origin == "001" && st.Connections[1].Origin == "002"
	}, 2*wait, 10*time.Millisecond, "one connection per origin once discovery is answered")
	n := c.count(feeds[0])
	require.Eventually(t, func() bool { return c.count(feeds[0]) >= n+5 && c.count(feeds[1]) >= n+5 }, wait, 5*time.Millisecond)
	for _, f := range feeds {
		consecutive(t, c.of(f))
	}
}

// TestSwitchWithoutRoomBreaksFirst: with room for a single chunk (2
// connections, 2 origins), a change of the chunk's feeds closes the old
// connections before the new ones open: the upstream never holds more
// than 2, and the feeds added are carried.
func TestSwitchWithoutRoomBreaksFirst(t *testing.T) {
	e := newEnv(t, func(c *simulatorConfig) { c.HAOrigins = []string{"001", "002"} })
	h := e.hub(t, func(c *Config) { c.MaxConnections = 2; c.FeedsPerConnection = 10 })
	feeds := e.crypto(t, 3)
	e.run(t, 25*time.Millisecond)
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the upstream's own count, as often as it changes
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), e.open()))
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	a := collect(t, subscribe(t, h, feeds[:1], SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{a}, feeds[0], 2)
	b := collect(t, subscribe(t, h, feeds[1:], SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{b}, feeds[1], 2)
	awaitMore(t, []*collector{b}, feeds[2], 2)
	close(stop)
	<-sampled
	assert.LessOrEqual(t, peak.Load(), int64(2), "upstream connections at once")
	assert.Equal(t, 0, h.Stats().FeedsUncarried)
}
