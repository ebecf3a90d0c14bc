package realtime

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
)

// followsLog is a Config.Frames that keeps, per stream, each second handed
// and the Follows it came with.
type followsLog struct {
	mu  sync.Mutex
	got map[feedid.ID][][2]int64 // {ts, Follows}, in the order handed
}

func (l *followsLog) add(f Frame) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.got == nil {
		l.got = map[feedid.ID][][2]int64{}
	}
	l.got[f.Stream] = append(l.got[f.Stream], [2]int64{f.ObservationsTimestamp, f.Follows})
}

func (l *followsLog) of(feed feedid.ID) [][2]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][2]int64(nil), l.got[feed]...)
}

// checkFollows asserts what every handed frame's Follows may be: the
// second handed just before it when it is the next second, else 0; that
// the first is 0, and any other 0 comes after a jump (seconds not
// handed). It returns the seconds whose Follows is 0.
func checkFollows(t *testing.T, feed feedid.ID, got [][2]int64) []int64 {
	t.Helper()
	require.NotEmpty(t, got)
	var breaks []int64
	for i, x := range got {
		if x[1] == 0 {
			breaks = append(breaks, x[0])
			if i > 0 {
				assert.Less(t, got[i-1][0], x[0]-1, "%s at %d follows nothing only after a jump", feed, x[0])
			}
			continue
		}
		require.Positive(t, i, "%s: the first frame handed follows nothing", feed)
		assert.Equal(t, got[i-1][0], x[1], "%s at %d follows the one handed before it", feed, x[0])
		assert.Equal(t, x[0]-1, x[1], "%s at %d follows the second before it", feed, x[0])
	}
	return breaks
}

// jumpOver reports whether got has a jump (a frame after seconds not
// handed) over second ts.
func jumpOver(got [][2]int64, ts int64) bool {
	for i := 1; i < len(got); i++ {
		if got[i-1][0] < ts && ts < got[i][0] {
			return true
		}
	}
	return false
}

// TestFramesFollowAFilledGap: the frames handed to Config.Frames follow
// each other, the first excepted, across an upstream outage whose seconds
// the gap's fill fetched whole: continuity vouches for every second.
func TestFramesFollowAFilledGap(t *testing.T) {
	e := newEnv(t, nil)
	var calls atomic.Int64
	sink := &followsLog{}
	h := e.hub(t, func(c *Config) {
		c.Backfill, c.BackfillMax = e.restBackfill(&calls), 2*time.Minute
		c.Frames = sink.add
	})
	feeds := e.crypto(t, 2)
	e.run(t, 25*time.Millisecond)
	a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{a}, feeds[0], 3)
	e.sim.Outage(time.Hour)
	e.passes(t, 8*time.Second)
	e.sim.Outage(0)
	require.Eventually(t, func() bool { return h.Stats().Backfilled >= 2*7 }, wait, 10*time.Millisecond)
	awaitMore(t, []*collector{a}, feeds[0], a.count(feeds[0])+3)
	require.Zero(t, h.Stats().Unfilled)
	for _, f := range feeds {
		got := sink.of(f)
		assert.Equal(t, []int64{got[0][0]}, checkFollows(t, f, got), "%s: only the first frame follows nothing", f)
	}
}

// TestFramesDoNotFollowAcrossUnfilledSeconds: seconds of a gap beyond
// backfill_max (counted unfilled), and seconds the backfill source
// answers without a stream's report (REST's 206: "not yet available",
// never a proof that there is none), are never bridged: the first frame
// after them has Follows 0, and every other frame follows the second
// before it.
func TestFramesDoNotFollowAcrossUnfilledSeconds(t *testing.T) {
	t.Run("beyond backfill_max", func(t *testing.T) {
		e := newEnv(t, nil)
		var calls atomic.Int64
		sink := &followsLog{}
		h := e.hub(t, func(c *Config) {
			c.Backfill, c.BackfillMax = e.restBackfill(&calls), 3*time.Second
			c.Frames = sink.add
		})
		feeds := e.crypto(t, 2)
		e.run(t, 25*time.Millisecond)
		a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
		awaitMore(t, []*collector{a}, feeds[0], 3)
		e.sim.Outage(time.Hour)
		e.passes(t, 16*time.Second)
		e.sim.Outage(0)
		require.Eventually(t, func() bool { return h.Stats().Unfilled > 0 }, wait, 10*time.Millisecond)
		awaitMore(t, []*collector{a}, feeds[0], a.count(feeds[0])+3)
		for _, f := range feeds {
			breaks := checkFollows(t, f, sink.of(f))
			// A loaded machine may stall the connection more than once:
			// each jump is a break.
			assert.GreaterOrEqual(t, len(breaks), 2, "%s: the first frame and the first after the clipped part follow nothing: %v", f, breaks)
		}
	})
	t.Run("answered without the stream", func(t *testing.T) {
		e := newEnv(t, nil)
		var calls atomic.Int64
		sink := &followsLog{}
		rest := e.restBackfill(&calls)
		var omitFrom atomic.Int64 // from this second on, the source answers without feeds[0]; 0: never
		var feeds []feedid.ID
		h := e.hub(t, func(c *Config) {
			c.Backfill = BackfillFunc(func(ctx context.Context, ids []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
				got, err := rest(ctx, ids, ts)
				if from := omitFrom.Load(); from > 0 && ts >= from {
					delete(got, feeds[0])
				}
				return got, err
			})
			c.BackfillMax = 2 * time.Minute
			c.Frames = sink.add
		})
		feeds = e.crypto(t, 2)
		e.run(t, 25*time.Millisecond)
		a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
		awaitMore(t, []*collector{a}, feeds[0], 3)
		e.sim.Outage(time.Hour)
		e.passes(t, 2*time.Second) // nothing is delivered now: the last frame is before the outage
		last := a.of(feeds[0])
		omitFrom.Store(last[len(last)-1].ts + 1)
		e.passes(t, 4*time.Second)
		e.sim.Outage(0)
		require.Eventually(t, func() bool { return h.Stats().Unfilled > 0 }, wait, 10*time.Millisecond)
		awaitMore(t, []*collector{a}, feeds[0], a.count(feeds[0])+3)
		got := sink.of(feeds[0])
		checkFollows(t, feeds[0], got)
		assert.True(t, jumpOver(got, omitFrom.Load()), "%s: never bridged over the seconds answered without it", feeds[0])
		got = sink.of(feeds[1])
		checkFollows(t, feeds[1], got)
		assert.False(t, jumpOver(got, omitFrom.Load()), "%s: its gap was filled whole", feeds[1])
	})
}
