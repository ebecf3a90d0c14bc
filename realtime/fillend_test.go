package realtime

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
	"streamgate/upstreamsim"
)

// gatedBackfill is a Config.Backfill over the env's REST bulk endpoint
// whose call number n (1 first, 0: none) announces itself on inFlight
// and waits for release before it goes out: the test ends a subscription
// while that call is in flight.
type gatedBackfill struct {
	n        atomic.Int64
	at       int64
	inFlight chan struct{}
	release  chan struct{}
}

func (e *env) gated(at int64) (*gatedBackfill, BackfillFunc) {
	g := &gatedBackfill{at: at, inFlight: make(chan struct{}), release: make(chan struct{})}
	var calls atomic.Int64
	rest := e.restBackfill(&calls)
	return g, func(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
		if g.n.Add(1) == g.at {
			close(g.inFlight)
			select {
			case <-g.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return rest(ctx, feeds, ts)
	}
}

// bulkCalls returns the bulk calls the upstream has answered.
func (e *env) bulkCalls() int64 {
	return e.sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointBulk)
}

// awaitFillsIdle waits until h's backfiller has no job queued and no
// round under way, after every feed of feeds has taken a live frame (so
// that any gap the live frames opened has been queued).
func awaitFillsIdle(t *testing.T, h *Hub, feeds []feedid.ID) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, f := range feeds {
			if _, _, ok := h.Latest(f); !ok {
				return false
			}
		}
		return true
	}, wait, 5*time.Millisecond, "a live frame of every feed")
	require.Eventually(t, h.cont.bf.idle, wait, 5*time.Millisecond, "the fills are over")
}

// TestResumeFillEndsWithItsSubscription: a consumer comes back with
// watermarks 45 s old on a hub that does not carry its feeds, and goes
// again while its fill's second call is in flight (before any live frame
// of its feeds). No bulk call is made after it has gone but that one, even
// once the feeds' live frames come (the feeds stay carried for their
// grace). Before, the seconds its fill had fetched moved the feeds'
// watermark, so their first live frame opened a gap of the 44 other
// seconds, fetched for nobody: 44 calls, each for every feed.
func TestResumeFillEndsWithItsSubscription(t *testing.T) {
	e := newEnv(t, nil)
	g, src := e.gated(2)
	h := e.hub(t, func(c *Config) {
		c.Backfill, c.BackfillMax, c.History, c.Grace = src, 2*time.Minute, time.Minute, time.Hour
	})
	feeds := e.crypto(t, 3)
	// No live frame while the consumer is there.
	require.NoError(t, e.sim.SetFaults(refuse(http.StatusServiceUnavailable)))
	e.run(t, 25*time.Millisecond)
	from := map[feedid.ID]int64{}
	for _, f := range feeds {
		from[f] = e.clk.Now().Unix() - 45
	}
	c := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096, From: from}))
	select {
	case <-g.inFlight:
	case <-time.After(wait):
		t.Fatal("the resume's fill made no second call")
	}
	c.sub.Close()
	<-c.done
	atEnd := e.bulkCalls()
	close(g.release)

	require.NoError(t, e.sim.SetFaults(upstreamsim.Faults{}))
	awaitFillsIdle(t, h, feeds)
	after := e.bulkCalls() - atEnd
	assert.LessOrEqual(t, after, int64(1), "bulk calls after the consumer had gone: only the one in flight")
}

// TestGapFillEndsWithTheLastSubscription: the upstream is away 40 s; its
// frames come back and the gap's fill starts; the only subscriber goes
// while the fill's first call is in flight. No other bulk call is made
// for the gap. A consumer that later resumes from before the gap on the
// same hub (the feeds stay carried for their grace) still gets every
// second, in order, once: the seconds the history lacks are fetched for
// it.
func TestGapFillEndsWithTheLastSubscription(t *testing.T) {
	e := newEnv(t, nil)
	g, src := e.gated(1)
	h := e.hub(t, func(c *Config) {
		c.Backfill, c.BackfillMax, c.History, c.Grace = src, 2*time.Minute, 2*time.Minute, time.Hour
	})
	feeds := e.crypto(t, 3)
	e.run(t, 25*time.Millisecond)
	a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	for _, f := range feeds {
		awaitMore(t, []*collector{a}, f, 3)
	}
	e.sim.Outage(time.Hour)
	e.passes(t, 40*time.Second)
	e.sim.Outage(0)
	select {
	case <-g.inFlight:
	case <-time.After(wait):
		t.Fatal("the gap's fill made no call")
	}
	a.sub.Close()
	<-a.done
	atEnd := e.bulkCalls()
	close(g.release)
	awaitFillsIdle(t, h, feeds)
	assert.LessOrEqual(t, e.bulkCalls()-atEnd, int64(1), "bulk calls after the last subscriber had gone: only the one in flight")

	// A consumer resuming from a's watermarks gets the gap's seconds.
	from := map[feedid.ID]int64{}
	for _, f := range feeds {
		fs := a.of(f)
		require.NotEmpty(t, fs)
		from[f] = fs[len(fs)-1].ts
	}
	b := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096, From: from}))
	for _, f := range feeds {
		awaitMore(t, []*collector{b}, f, 45)
	}
	for _, f := range feeds {
		fs := b.of(f)
		assert.Equal(t, from[f]+1, fs[0].ts, "%s resumes right after its watermark", f)
		consecutive(t, fs)
	}
}
