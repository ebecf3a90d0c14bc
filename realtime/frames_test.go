package realtime

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
)

// sinkLog is a Config.Frames that remembers what it was handed.
type sinkLog struct {
	mu    sync.Mutex
	seen  map[feedid.ID]map[int64]int // per stream, the times each second was handed
	order map[feedid.ID][]int64       // per stream, the seconds in the order handed
	bad   []string                    // frames whose fields are not their bytes'
}

func newSinkLog() *sinkLog {
	return &sinkLog{seen: map[feedid.ID]map[int64]int{}, order: map[feedid.ID][]int64{}}
}

func (l *sinkLog) add(f Frame) {
	var doc struct {
		Report struct {
			FeedID                string `json:"feedID"`
			ValidFromTimestamp    int64  `json:"validFromTimestamp"`
			ObservationsTimestamp int64  `json:"observationsTimestamp"`
		} `json:"report"`
	}
	err := json.Unmarshal(f.Bytes, &doc)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || feedid.ID(doc.Report.FeedID) != f.Stream || doc.Report.ObservationsTimestamp != f.ObservationsTimestamp ||
		doc.Report.ValidFromTimestamp != f.ValidFromTimestamp || f.ValidFromTimestamp == 0 {
		l.bad = append(l.bad, string(f.Bytes))
	}
	if l.seen[f.Stream] == nil {
		l.seen[f.Stream] = map[int64]int{}
	}
	l.seen[f.Stream][f.ObservationsTimestamp]++
	l.order[f.Stream] = append(l.order[f.Stream], f.ObservationsTimestamp)
}

// TestFramesSinkSeesEachSecondOnce: Config.Frames is handed every
// (stream, second) the hub delivers, once, in order per stream: live
// frames, the same frames again from another replica (dropped as
// duplicates), the seconds of an outage's gap (fetched), and not the
// replay of a returning consumer; each as the hub read it (stream and
// both times those of its bytes).
func TestFramesSinkSeesEachSecondOnce(t *testing.T) {
	e := newEnv(t, nil)
	var calls atomic.Int64
	sink := newSinkLog()
	h := e.hub(t, func(c *Config) {
		c.Backfill, c.BackfillMax, c.History = e.restBackfill(&calls), 2*time.Minute, time.Minute
		c.Frames = sink.add
	})
	feeds := e.crypto(t, 3)
	e.run(t, 25*time.Millisecond)
	a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{a}, feeds[0], 3)

	// The frames delivered so far, again, as another replica relays them.
	relay := &memSession{}
	relay.up.Store(true)
	for _, f := range feeds {
		for _, x := range a.of(f) {
			h.deliverFrame(originShared, relay, x.data)
		}
	}

	e.sim.Outage(time.Hour)
	e.passes(t, 8*time.Second)
	e.sim.Outage(0)
	awaitMore(t, []*collector{a}, feeds[0], a.count(feeds[0])+5)
	require.Positive(t, h.Stats().Backfilled, "the outage's seconds were fetched")

	// A consumer that comes back gets a replay, not new seconds.
	from := map[feedid.ID]int64{}
	for _, f := range feeds {
		fs := a.of(f)
		from[f] = fs[len(fs)-1].ts - 5
	}
	back := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096, From: from}))
	awaitMore(t, []*collector{back}, feeds[0], 8)

	got := map[feedid.ID][]frame{}
	for _, f := range feeds {
		got[f] = a.of(f)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	assert.Empty(t, sink.bad, "frames handed with fields other than their bytes'")
	for _, f := range feeds {
		fs := got[f]
		consecutive(t, fs)
		for _, x := range fs {
			assert.Equal(t, 1, sink.seen[f][x.ts], "%s at %d handed once", f, x.ts)
		}
		for ts, n := range sink.seen[f] {
			assert.Equal(t, 1, n, "%s at %d handed once", f, ts)
		}
		order := sink.order[f]
		for i := 1; i < len(order); i++ {
			assert.Equal(t, order[i-1]+1, order[i], "%s handed in order, every second", f)
		}
	}
}
