package realtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/auth"
	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
	"streamgate/realtime/share"
	"streamgate/redisconn"
	"streamgate/upstreamsim"
)

// restBackfill is a Config.Backfill over the env's REST bulk endpoint,
// counting its calls.
func (e *env) restBackfill(calls *atomic.Int64) BackfillFunc {
	return func(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
		calls.Add(1)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			e.srv.URL+"/api/v1/reports/bulk?feedIDs="+strings.Join(feedid.Strings(feeds), ",")+"&timestamp="+strconv.FormatInt(ts, 10), nil)
		if err != nil {
			return nil, err
		}
		auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), e.clk.Now())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
			return nil, fmt.Errorf("bulk: %d", resp.StatusCode)
		}
		var doc struct {
			Reports []json.RawMessage `json:"reports"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			return nil, err
		}
		out := map[feedid.ID][]byte{}
		for _, raw := range doc.Reports {
			var r struct {
				FeedID string `json:"feedID"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				return nil, err
			}
			out[feedid.ID(r.FeedID)] = append(append([]byte(`{"report":`), raw...), '}')
		}
		return out, nil
	}
}

// TestGapBackfilled: an upstream outage stops every stream; when the
// frames start again the missing seconds are fetched over REST and every
// subscriber gets every second, in order, once, the fetched ones byte for
// byte what the WebSocket would have carried.
func TestGapBackfilled(t *testing.T) {
	e := newEnv(t, nil)
	var calls atomic.Int64
	h := e.hub(t, func(c *Config) { c.Backfill, c.BackfillMax = e.restBackfill(&calls), 2*time.Minute })
	feeds := e.crypto(t, 3)
	e.run(t, 25*time.Millisecond)
	a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	b := collect(t, subscribe(t, h, feeds[:1], SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{a, b}, feeds[0], 3)

	e.sim.Outage(time.Hour)
	e.passes(t, 12*time.Second)
	e.sim.Outage(0)
	before := a.count(feeds[0])
	awaitMore(t, []*collector{a, b}, feeds[0], before+5)

	st := h.Stats()
	assert.Positive(t, st.Backfilled, "the outage's seconds were fetched")
	assert.Zero(t, st.Unfilled)
	assert.Positive(t, calls.Load())
	assert.LessOrEqual(t, calls.Load(), st.Backfilled, "one bulk call per second for all the feeds")
	for _, f := range feeds {
		fs := a.of(f)
		consecutive(t, fs)
		for _, x := range fs {
			if x.ts%7 == 0 { // a sample: the bytes are the upstream's
				assert.JSONEq(t, string(e.rest(t, f, x.ts)), string(x.data))
			}
		}
	}
	consecutive(t, b.of(feeds[0]))
}

// TestGapFillAskedAgain: a gap's fill whose first call for a second fails
// (the upstream's budget refused it, as when a Redis failover leaves each
// replica spending the budget alone and the upstream answers 429) is asked
// again, and every second still reaches every subscriber; before, a
// recent second lost that way was neither delivered nor counted.
func TestGapFillAskedAgain(t *testing.T) {
	e := newEnv(t, nil)
	var calls, failed atomic.Int64
	rest := e.restBackfill(&calls)
	var mu sync.Mutex
	asked := map[int64]bool{}
	flaky := BackfillFunc(func(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
		mu.Lock()
		first := !asked[ts]
		asked[ts] = true
		mu.Unlock()
		if first {
			failed.Add(1)
			return nil, errors.New("upstream budget exhausted: retry after 1s")
		}
		return rest(ctx, feeds, ts)
	})
	h := e.hub(t, func(c *Config) { c.Backfill, c.BackfillMax = flaky, 2*time.Minute })
	feeds := e.crypto(t, 2)
	e.run(t, 25*time.Millisecond)
	a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{a}, feeds[0], 3)

	e.sim.Outage(time.Hour)
	e.passes(t, 12*time.Second)
	e.sim.Outage(0)
	before := a.count(feeds[0])
	awaitMore(t, []*collector{a}, feeds[0], before+5)

	st := h.Stats()
	assert.Positive(t, failed.Load(), "the first call of each second failed")
	assert.Positive(t, st.Backfilled)
	assert.Zero(t, st.Unfilled)
	for _, f := range feeds {
		consecutive(t, a.of(f))
	}
}

// TestGapBeyondBackfillMax: of a gap longer than backfill_max, the newest
// seconds are filled and the rest counted; nothing comes twice or out of
// order.
func TestGapBeyondBackfillMax(t *testing.T) {
	e := newEnv(t, nil)
	var calls atomic.Int64
	h := e.hub(t, func(c *Config) { c.Backfill, c.BackfillMax = e.restBackfill(&calls), 3*time.Second })
	feeds := e.crypto(t, 2)
	e.run(t, 25*time.Millisecond)
	a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{a}, feeds[0], 3)
	e.sim.Outage(time.Hour)
	e.passes(t, 16*time.Second)
	e.sim.Outage(0)
	require.Eventually(t, func() bool { return h.Stats().Unfilled > 0 }, wait, 10*time.Millisecond)
	awaitMore(t, []*collector{a}, feeds[0], 3)
	st := h.Stats()
	assert.Equal(t, int64(2*3), st.Backfilled, "3 seconds of each of the 2 streams")
	for _, f := range feeds {
		fs := a.of(f)
		increasing(t, fs)
		// The last 3 seconds before the frames came back are there.
		i := len(fs) - 1
		for i > 0 && fs[i-1].ts == fs[i].ts-1 {
			i--
		}
		assert.Less(t, i, len(fs)-3, "the seconds after the clipped part are consecutive")
	}
}

// TestResume: a consumer that comes back with its watermark gets every
// report after it, in order, once, then live ones: from the history on the
// same hub, and over REST on a hub that did not carry the feed (another
// replica).
func TestResume(t *testing.T) {
	e := newEnv(t, nil)
	var calls atomic.Int64
	mk := func(c *Config) {
		c.Backfill, c.BackfillMax, c.History = e.restBackfill(&calls), 2*time.Minute, time.Minute
	}
	h := e.hub(t, mk)
	feeds := e.crypto(t, 2)
	e.run(t, 25*time.Millisecond)
	keep := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096})) // keeps the feeds carried
	first := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{first}, feeds[1], 3)
	first.sub.Close()
	<-first.done
	from := map[feedid.ID]int64{}
	for _, f := range feeds {
		fs := first.of(f)
		from[f] = fs[len(fs)-1].ts
	}
	awaitMore(t, []*collector{keep}, feeds[0], 5) // the consumer is away

	sub := subscribe(t, h, feeds, SubscribeOptions{Queue: 4096, From: from})
	now := sub.Replayed()
	assert.Positive(t, now, "replayed from the history at once")
	back := collect(t, sub)
	awaitMore(t, []*collector{back}, feeds[0], 5)
	for _, f := range feeds {
		fs := back.of(f)
		require.NotEmpty(t, fs)
		assert.Equal(t, from[f]+1, fs[0].ts, "%s resumes right after its watermark", f)
		consecutive(t, fs)
	}
	assert.Zero(t, calls.Load(), "the history had it all")

	// Another hub, which never carried the feeds: the missed seconds come
	// over REST, then live ones.
	other := e.hub(t, mk)
	from2 := map[feedid.ID]int64{}
	for _, f := range feeds {
		fs := back.of(f)
		from2[f] = fs[len(fs)-1].ts - 4
	}
	sub2 := subscribe(t, other, feeds, SubscribeOptions{Queue: 4096, From: from2})
	c2 := collect(t, sub2)
	awaitMore(t, []*collector{c2}, feeds[0], 8)
	for _, f := range feeds {
		fs := c2.of(f)
		assert.Equal(t, from2[f]+1, fs[0].ts, "%s resumes right after its watermark", f)
		consecutive(t, fs)
	}
	assert.Positive(t, calls.Load())
	assert.Equal(t, int64(1), other.Stats().Resumed)
	assert.Positive(t, other.Stats().Replayed)
}

// TestResumeRightAwayOnAHubNewToTheFeeds: a consumer whose watermark is the
// newest second comes back at once on a hub that has never carried its
// feeds. No second is missing yet when it subscribes, but the hub's first
// frames of the feeds come seconds later (a connection to open): those
// seconds are fetched, and the consumer gets every second from its
// watermark on, in order, once.
//
// The first collector's hub is connected before the upgrades are refused,
// so the upstream goes on publishing to it meanwhile.
func TestResumeRightAwayOnAHubNewToTheFeeds(t *testing.T) {
	e := newEnv(t, nil)
	var calls atomic.Int64
	mk := func(c *Config) {
		c.Backfill, c.BackfillMax, c.History = e.restBackfill(&calls), 2*time.Minute, time.Minute
	}
	h := e.hub(t, mk)
	feeds := e.crypto(t, 2)
	e.run(t, 25*time.Millisecond)
	first := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{first}, feeds[1], 3)

	other := e.hub(t, mk)
	from := map[feedid.ID]int64{}
	for _, f := range feeds {
		fs := first.of(f)
		from[f] = fs[len(fs)-1].ts
	}
	// The other hub's upgrades are refused for a while: its first frames
	// come seconds after the consumer's watermark.
	require.NoError(t, e.sim.SetFaults(refuse(http.StatusServiceUnavailable)))
	sub := subscribe(t, other, feeds, SubscribeOptions{Queue: 4096, From: from})
	back := collect(t, sub)
	e.passes(t, 5*time.Second)
	require.NoError(t, e.sim.SetFaults(upstreamsim.Faults{}))
	awaitMore(t, []*collector{back}, feeds[0], 8)
	awaitMore(t, []*collector{back}, feeds[1], 8)
	for _, f := range feeds {
		fs := back.of(f)
		require.NotEmpty(t, fs)
		assert.Equal(t, from[f]+1, fs[0].ts, "%s resumes right after its watermark", f)
		consecutive(t, fs)
	}
}

// TestUpstreamBackLogged: a lost upstream connection is logged when lost
// and again when it is back.
func TestUpstreamBackLogged(t *testing.T) {
	e := newEnv(t, nil)
	core, logs := observer.New(zap.InfoLevel)
	h := e.hub(t, func(c *Config) { c.Logger = zap.New(core) })
	feeds := e.crypto(t, 1)
	e.run(t, 25*time.Millisecond)
	a := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{a}, feeds[0], 2)
	require.Positive(t, e.sim.DropWS(simulatorDrop()))
	require.Eventually(t, func() bool { return logs.FilterMessage("upstream WebSocket back").Len() > 0 }, wait, 10*time.Millisecond)
	assert.Positive(t, logs.FilterMessage("upstream WebSocket lost").Len())
	back := logs.FilterMessage("upstream WebSocket back").All()[0]
	assert.Equal(t, "mainnet", back.ContextMap()["network"])
	assert.Contains(t, back.ContextMap(), "down")
}

// TestShareTakeoverWithoutGap: the holder of the chunk crashes (its Redis
// client and hub go without handing over); another replica frees its
// lease as soon as its presence has expired, long before the lease would
// (a lease of 9s here), takes the chunk, and what the holder had not
// relayed is filled from REST: every follower's subscription gets every
// second, in order, once.
func TestShareTakeoverWithoutGap(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	var calls atomic.Int64
	hubs := make([]*Hub, 3)
	cols := make([]*collector, 3)
	clients := make([]*redisconn.Client, 3)
	for i := range hubs {
		c, err := redisconn.NewURL(rs.URL(), "", redisconn.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		clients[i] = c
		hubs[i] = e.hub(t, func(cfg *Config) {
			cfg.Share = &share.Config{Client: c, Lease: 9 * time.Second, Replica: "r" + strconv.Itoa(i)}
			cfg.Backfill, cfg.BackfillMax = e.restBackfill(&calls), time.Minute
		})
		cols[i] = collect(t, subscribe(t, hubs[i], feeds, SubscribeOptions{Queue: 4096}))
	}
	e.run(t, 50*time.Millisecond)
	require.Eventually(t, func() bool { return len(holders(hubs)) == 1 }, wait, 10*time.Millisecond)
	old := holders(hubs)[0]
	awaitMore(t, cols, feeds[0], 3)
	// The holder has made itself known (its first presence).
	require.Eventually(t, func() bool {
		_, err := clients[old].ZScore(context.Background(), "streamgate:ws:v2:{mainnet}:known", "r"+strconv.Itoa(old)).Result()
		return err == nil
	}, wait, 10*time.Millisecond)
	// Crash: no handover, no lease released, no presence deleted.
	clients[old].Close()
	hubs[old].Close()
	var rest []*Hub
	var restCols []*collector
	for i := range hubs {
		if i != old {
			rest, restCols = append(rest, hubs[i]), append(restCols, cols[i])
		}
	}
	require.Eventually(t, func() bool { return len(holders(rest)) == 1 }, wait, 10*time.Millisecond, "taken over within the lease")
	awaitMore(t, restCols, feeds[0], 10)
	reaped := int64(0)
	for _, h := range rest {
		reaped += h.Stats().Share.Reaped
	}
	assert.Positive(t, reaped, "the dead holder's lease was freed, not waited for")
	for _, c := range restCols {
		for _, f := range feeds {
			consecutive(t, c.of(f))
		}
	}
}

// TestRecheckDropsWhatNoLongerPasses: after a reload that makes report
// verification stricter, Recheck drops the frames of the history (what
// resume replays) and the newest report (what latest answers) that the
// new rules refuse; the rules then also refuse new such frames (Check).
func TestRecheckDropsWhatNoLongerPasses(t *testing.T) {
	e := newEnv(t, nil)
	var cutoff atomic.Int64 // frames after it do not pass; the rules start lenient
	cutoff.Store(math.MaxInt64)
	admit := func(frame []byte) bool {
		_, ts, _ := parseFrame(frame)
		return ts <= cutoff.Load()
	}
	h := e.hub(t, func(c *Config) { c.History, c.Check = time.Minute, admit })
	feed := e.crypto(t, 1)[0]
	e.run(t, 25*time.Millisecond)
	keep := collect(t, subscribe(t, h, []feedid.ID{feed}, SubscribeOptions{Queue: 4096}))
	awaitMore(t, []*collector{keep}, feed, 6)

	_, newest, ok := h.Latest(feed)
	require.True(t, ok)
	cutoff.Store(newest - 3) // the stricter rules: the three newest held fail
	dropped := h.Recheck(admit)
	assert.GreaterOrEqual(t, dropped, 3+1, "three frames of the history and the newest report at least")
	_, _, ok = h.Latest(feed)
	assert.False(t, ok, "latest no longer answers a refused report")

	// Rules that pass the live reports again. A resume from two seconds
	// before the cutoff replays what the history kept, then live reports:
	// none of the refused seconds.
	cutoff.Store(math.MaxInt64)
	sub := subscribe(t, h, []feedid.ID{feed}, SubscribeOptions{Queue: 4096, From: map[feedid.ID]int64{feed: newest - 5}})
	back := collect(t, sub)
	awaitMore(t, []*collector{back}, feed, 3)
	for _, f := range back.of(feed) {
		assert.False(t, f.ts > newest-3 && f.ts <= newest, "replayed the refused second %d", f.ts)
	}
	awaitMore(t, []*collector{keep}, feed, 1)
	_, _, ok = h.Latest(feed)
	assert.True(t, ok)
}

// TestUpstreamOutageLoggedOnce: an outage that drops and then refuses
// every upstream connection of two origins, three connections each, is
// one warning per origin when it starts and one line per origin when it
// is over; the attempts in between are debug lines. Before, every
// connection logged its loss, each refused attempt and its return.
func TestUpstreamOutageLoggedOnce(t *testing.T) {
	e := newEnv(t, func(c *simulatorConfig) { c.HAOrigins = []string{"001", "002"} })
	core, logs := observer.New(zap.InfoLevel)
	h := e.hub(t, func(c *Config) { c.Logger = zap.New(core); c.FeedsPerConnection = 1; c.MaxConnections = 8 })
	feeds := e.crypto(t, 3)
	e.run(t, 25*time.Millisecond)
	c := collect(t, subscribe(t, h, feeds, SubscribeOptions{Queue: 4096}))
	allUp := func() bool {
		st := h.Stats()
		up := 0
		for _, cs := range st.Connections {
			if cs.State == stateUp {
				up++
			}
		}
		return len(st.Connections) == 6 && up == 6
	}
	require.Eventually(t, allUp, wait, 5*time.Millisecond, "three connections per origin up")
	awaitMore(t, []*collector{c}, feeds[0], 2)
	require.Equal(t, 0, logs.FilterLevelExact(zap.WarnLevel).Len(), "%v", logs.All())

	require.Positive(t, e.sim.Outage(time.Second))
	require.Eventually(t, func() bool { return logs.FilterMessage("upstream WebSocket back").Len() >= 2 }, wait, 10*time.Millisecond)
	require.Eventually(t, allUp, wait, 5*time.Millisecond, "every connection up again")
	awaitMore(t, []*collector{c}, feeds[0], 2)

	warns := logs.FilterLevelExact(zap.WarnLevel).All()
	origins := map[string]int{}
	for _, w := range warns {
		assert.Equal(t, "upstream WebSocket lost", w.Message)
		origins[w.ContextMap()["origin"].(string)]++
	}
	assert.Equal(t, map[string]int{"001": 1, "002": 1}, origins, "one warning per origin")
	back := map[string]int{}
	for _, b := range logs.FilterMessage("upstream WebSocket back").All() {
		back[b.ContextMap()["origin"].(string)]++
		assert.Positive(t, b.ContextMap()["failures"])
	}
	assert.Equal(t, map[string]int{"001": 1, "002": 1}, back, "one line per origin when it is back")
	assert.Zero(t, logs.FilterMessage("upstream WebSocket refused").Len(), "refusals in between are not warnings")
}
