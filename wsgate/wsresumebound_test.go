package wsgate_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// resumeBoundEnv is a gateway whose bulk budget is small (a resume fill
// of a few seconds takes seconds), whose feeds nobody wants leave the hub
// at once (a returning client's seconds are fetched over REST), with a
// resume window of window. fills counts the upstream bulk calls for
// BTC/USD, the stream the tests resume (a gap of another stream, filled
// from REST, is not theirs).
func resumeBoundEnv(t *testing.T, window time.Duration, daily int64) (env *servertest.Env, fills func() int64) {
	var n atomic.Int64
	var btc atomic.Pointer[string]
	env = servertest.Start(t, servertest.Options{
		Sim: func(c *upstreamsim.Config) { c.WSTick = 50 * time.Millisecond },
		Upstream: func(_ string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if id := btc.Load(); id != nil && r.URL.Path == upstreamsim.EndpointBulk && strings.Contains(r.URL.RawQuery, *id) {
					n.Add(1)
				}
				h.ServeHTTP(w, r)
			})
		},
		Config: func(c *config.Config) {
			c.Realtime.ResumeWindow = window
			c.Realtime.Grace = 50 * time.Millisecond
			for _, n := range c.Networks {
				n.Upstream.Budget = config.Rate{RPS: 2, Burst: 1}
			}
			c.Team(config.DemoTeam).DailyQuota = daily
		},
	})
	id := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	btc.Store(&id)
	return env, n.Load
}

// awaitMore waits until w has n more frames of feed than it had.
func awaitMore(t *testing.T, w *wsClient, feed string, n int) {
	t.Helper()
	awaitSeconds(t, w, []string{feed}, len(w.of(feed))+n)
}

// awaitWSClients waits until the network has n stream clients open.
func awaitWSClients(t *testing.T, env *servertest.Env, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return metricValue(t, env.Registry, "streamgate_ws_clients", map[string]string{"network": "mainnet"}) == float64(n)
	}, 20*time.Second, 10*time.Millisecond, "%d stream clients", n)
}

// awaitUnwanted waits until the mainnet hub wants only n feeds.
func awaitUnwanted(t *testing.T, env *servertest.Env, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return env.Server.Hub("mainnet").Stats().FeedsWanted == n },
		20*time.Second, 10*time.Millisecond, "%d feeds wanted", n)
}

// lostClient is the set-up of the resume tests: a client of LINK/USD
// (kw, the test's clock: one frame a second) keeps the upstream
// connection; a client of BTC and ETH (target) streams two seconds and is
// lost (no close frame), and the hub lets its streams go, so that a
// resume fetches them over REST. It returns the keeping client, the
// lost client's streams and its watermarks.
type lostClient struct {
	kw     *wsClient
	link   string
	feeds  []string
	target string
	from   map[string]int64
}

func loseClient(t *testing.T, ctx context.Context, env *servertest.Env) *lostClient {
	t.Helper()
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	lc := &lostClient{link: env.FeedID(t, upstreamsim.Mainnet, "LINK", "USD", "V3"), feeds: []string{btc, eth},
		target: "/api/v1/ws?feedIDs=" + btc + "," + eth}
	keep, _, err := dialWS(ctx, demo, env.Mainnet, "/api/v1/ws?feedIDs="+lc.link, "")
	require.NoError(t, err)
	lc.kw = readAll(t, ctx, keep)
	awaitMore(t, lc.kw, lc.link, 1)
	c, _, err := dialWS(ctx, demo, env.Mainnet, lc.target, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	awaitSeconds(t, w, lc.feeds, 2)
	c.CloseNow() // lost: no close frame
	<-w.done
	lc.from = lastOf(t, w, lc.feeds)
	awaitWSClients(t, env, 1)
	awaitUnwanted(t, env, 1)
	return lc
}

// TestWSResumeBoundedByWhatWasReceived reproduces, small, a client that
// streams, drops, comes back later for a moment without receiving
// anything, drops again and comes back once more: the fill of its second
// visit stops when it leaves (before the fix it went on, all of it, after
// the client had gone), and its third visit, more than a window after the
// last report it received but within a window of its second visit, starts
// live (before the fix the second visit's record extended the window).
func TestWSResumeBoundedByWhatWasReceived(t *testing.T) {
	const window = 8 * time.Second
	env, fills := resumeBoundEnv(t, window, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	demo := servertest.Demo()
	lc := loseClient(t, ctx, env)
	kw, link, feeds, target, from := lc.kw, lc.link, lc.feeds, lc.target, lc.from
	btc := feeds[0]

	// Away 5 s: 5 seconds or so to fetch, at most 2 calls a second.
	awaitMore(t, kw, link, 5)
	bulkBefore := fills()
	c2, _, err := dialWS(ctx, demo, env.Mainnet, target, "")
	require.NoError(t, err)
	c2.CloseNow() // gone again at once, having received nothing
	awaitWSClients(t, env, 1)
	awaitUnwanted(t, env, 1)
	require.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_resumed_total", map[string]string{"network": "mainnet"}))
	bulkAtEnd := fills()

	// Four seconds later, the fill of a client that has gone made at most
	// the call under way when it left.
	awaitMore(t, kw, link, 4)
	bulkAfter := fills()
	assert.LessOrEqual(t, bulkAfter-bulkAtEnd, int64(1),
		"bulk calls after the resumed client left (%d while it was there)", bulkAtEnd-bulkBefore)

	// Now more than a window after the newest report it received (the
	// second visit received none), though within a window of that visit.
	for time.Now().Unix() <= from[btc]+int64(window/time.Second) {
		awaitMore(t, kw, link, 1)
	}
	c3, _, err := dialWS(ctx, demo, env.Mainnet, target, "")
	require.NoError(t, err)
	w3 := readAll(t, ctx, c3)
	awaitSeconds(t, w3, feeds, 1)
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_resumed_total", map[string]string{"network": "mainnet"}),
		"a third visit a window after the last report received starts live")
	assert.Greater(t, w3.of(btc)[0], from[btc]+int64(window/time.Second), "no replay beyond the window")
}

// TestWSResumeChargedToTheTeam: a resumed client's fill takes one unit of
// its team's daily quota per second fetched, and stops when the quota is
// spent; the team's next request is refused for it (before the fix the
// fill cost the team nothing: the upgrade's unit alone).
func TestWSResumeChargedToTheTeam(t *testing.T) {
	const daily = 6
	env, _ := resumeBoundEnv(t, 30*time.Second, daily)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	demo := servertest.Demo()
	lc := loseClient(t, ctx, env) // two upgrades: quota 2
	kw, link, feeds, target, from := lc.kw, lc.link, lc.feeds, lc.target, lc.from
	btc := feeds[0]
	awaitMore(t, kw, link, 8) // away 8 s: more seconds than the 3 units left

	c2, _, err := dialWS(ctx, demo, env.Mainnet, target, "") // 3
	require.NoError(t, err)
	w2 := readAll(t, ctx, c2)
	// The fill stops at the quota: what it could not fetch is counted,
	// and the client goes on live.
	require.Eventually(t, func() bool {
		return metricValue(t, env.Registry, "streamgate_ws_gaps_unfilled_total", map[string]string{"network": "mainnet"}) > 0
	}, 30*time.Second, 20*time.Millisecond, "the seconds beyond the quota unfilled")
	awaitSeconds(t, w2, feeds, 1)
	got := w2.of(btc)
	filled := 0
	for _, ts := range got {
		if ts <= from[btc]+8 {
			filled++
		}
	}
	// Three units were left after the three upgrades.
	assert.LessOrEqual(t, filled, daily-3, "at most the seconds the quota paid for: %v after %d", got, from[btc])
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the fill spent the team's quota")
}

// TestWSResumeFillLeavesHalfTheBudget: a resume fill takes at most half
// of the bulk budget, however long its gap, so that the latest refreshes
// and the teams' own calls always have the other half (before the fix it
// took every call the budget allowed, 2 a second here); and it still
// brings the client every second it missed.
func TestWSResumeFillLeavesHalfTheBudget(t *testing.T) {
	env, fills := resumeBoundEnv(t, 30*time.Second, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	demo := servertest.Demo()
	lc := loseClient(t, ctx, env)
	kw, link, feeds, target, from := lc.kw, lc.link, lc.feeds, lc.target, lc.from
	awaitMore(t, kw, link, 14) // away 14 s: 14 s of fill at 1 call a second

	start, b0 := time.Now(), fills()
	c2, _, err := dialWS(ctx, demo, env.Mainnet, target, "")
	require.NoError(t, err)
	w2 := readAll(t, ctx, c2)
	awaitMore(t, kw, link, 8) // 8 s or more
	b1, took := fills(), time.Since(start)
	// The fill's share is 1 call every 1.02 s (half of 2 a second): at
	// most one per 1.02 s of the span, and the first at once; the whole
	// budget would give it twice as many.
	most := int64(took/(1020*time.Millisecond)) + 1
	assert.LessOrEqual(t, b1-b0, most, "bulk calls of the fill in %v", took)
	assert.Greater(t, b1-b0, int64(3), "the fill ran")

	require.Eventually(t, func() bool {
		for _, f := range feeds {
			if ts := w2.of(f); len(ts) == 0 || ts[len(ts)-1] < from[f]+18 {
				return false
			}
		}
		return true
	}, 90*time.Second, 50*time.Millisecond, "the client caught up")
	followsOn(t, w2, from)
}
