package wsgate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// upstreamReports records the report requests the upstream receives
// (REST: at a timestamp, bulk, pages).
type upstreamReports struct {
	mu  sync.Mutex
	got []string
}

func (r *upstreamReports) wrap(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/api/v1/reports") {
			r.mu.Lock()
			r.got = append(r.got, req.URL.RequestURI())
			r.mu.Unlock()
		}
		h.ServeHTTP(w, req)
	})
}

func (r *upstreamReports) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// heldSeconds opens the Pebble archive in dir (its gateway stopped) and
// returns the seconds it holds of each feed from since on.
func heldSeconds(t *testing.T, dir string, feeds []string, since int64) map[string]map[int64]bool {
	t.Helper()
	st, err := archive.OpenPebble(archive.PebbleOptions{Dir: dir})
	require.NoError(t, err)
	defer st.Close()
	out := map[string]map[int64]bool{}
	for _, f := range feeds {
		out[f] = map[int64]bool{}
		from := uint32(since)
		for {
			rs, err := st.Page(t.Context(), upstreamsim.Mainnet, feedid.ID(f), from, 1000)
			require.NoError(t, err)
			for _, r := range rs {
				out[f][int64(r.ObservationsTimestamp)] = true
			}
			if len(rs) < 1000 {
				break
			}
			from = rs[len(rs)-1].ObservationsTimestamp + 1
		}
	}
	return out
}

// asking returns the recorded report requests that ask the upstream for
// a second held gives for their stream: a report or a bulk at its
// timestamp, or any second a page may return (from its start, limit
// seconds at one report a second).
func (r *upstreamReports) asking(t *testing.T, held map[string]map[int64]bool) []string {
	t.Helper()
	var out []string
	for _, target := range r.take() {
		u, err := url.Parse(target)
		require.NoError(t, err)
		q := u.Query()
		feeds := strings.Split(q.Get("feedIDs"), ",")
		if f := q.Get("feedID"); f != "" {
			feeds = []string{f}
		}
		from, to := int64(0), int64(0)
		if ts := q.Get("timestamp"); ts != "" {
			from, err = strconv.ParseInt(ts, 10, 64)
			require.NoError(t, err)
			to = from
		} else if ts := q.Get("startTimestamp"); ts != "" {
			from, err = strconv.ParseInt(ts, 10, 64)
			require.NoError(t, err)
			limit, err := strconv.ParseInt(q.Get("limit"), 10, 64)
			if err != nil || limit <= 0 {
				limit = 100
			}
			to = from + limit - 1
		} else {
			continue // latest: not a second the archive answers
		}
	found:
		for _, f := range feeds {
			for s := from; s <= to; s++ {
				if held[f][s] {
					out = append(out, target)
					break found
				}
			}
		}
	}
	return out
}

// pinnedArchive configures a gateway that archives into dir and carries
// feeds at all times.
func pinnedArchive(t *testing.T, dir string, feeds []string) func(*config.Config) {
	t.Helper()
	var pinned config.StreamIDs
	for _, f := range feeds {
		id, err := feedid.Parse(f)
		require.NoError(t, err)
		pinned = append(pinned, id)
	}
	return func(c *config.Config) {
		noReplayCheck(c)
		c.Server.AdminListen = "127.0.0.1:0"
		c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, dir
		n := c.Networks[upstreamsim.Mainnet]
		n.Upstream.WSPinned = pinned
		c.Networks[upstreamsim.Mainnet] = n
	}
}

// latest waits until the hub of env has delivered a report of every feed
// at or after the second min, and returns the newest second of each.
func latest(t *testing.T, env *servertest.Env, feeds []string, min int64) map[string]int64 {
	t.Helper()
	hub := env.Server.Hub(upstreamsim.Mainnet)
	require.NotNil(t, hub)
	out := map[string]int64{}
	require.Eventually(t, func() bool {
		for _, f := range feeds {
			_, ts, ok := hub.Latest(feedid.ID(f))
			if !ok || ts < min {
				return false
			}
			out[f] = ts
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "a report of every stream at or after %d", min)
	return out
}

// fillArchive asks the admin listener of env to fill [from, to] of feed
// into the archive, and waits until it is done.
func fillArchive(t *testing.T, env *servertest.Env, feed string, from, to int64) {
	t.Helper()
	admin := "http://" + env.Server.Addr("admin")
	resp, err := http.Post(fmt.Sprintf("%s%s?network=%s&feedID=%s&from=%d&to=%d", admin, archive.PathFill, upstreamsim.Mainnet, feed, from, to), "", nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
	require.Eventually(t, func() bool {
		resp, err := http.Get(admin + archive.PathFills)
		require.NoError(t, err)
		defer resp.Body.Close()
		var got struct{ Fills []archive.FillProgress }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		for _, f := range got.Fills {
			if string(f.Stream) == feed && f.From == uint32(from) {
				require.NotEqual(t, archive.FillFailed, f.State, f.Error)
				return f.State == archive.FillDone
			}
		}
		return false
	}, 120*time.Second, 20*time.Millisecond, "the fill of %s", feed)
}

// everySecondOnce checks that w's frames of each feed are every second
// from first[feed] on, each once, in order, up to at least upTo.
func everySecondOnce(t *testing.T, w *wsClient, first map[string]int64, upTo int64) {
	t.Helper()
	for f, from := range first {
		ts := w.of(f)
		require.NotEmpty(t, ts, f)
		seen := map[int64]int{}
		for _, s := range ts {
			seen[s]++
		}
		for s := from; s <= upTo; s++ {
			require.Equal(t, 1, seen[s], "%s: second %d received %d times", f, s, seen[s])
		}
		assert.Equal(t, from, ts[0], "%s starts at its first second", f)
		for i := 1; i < len(ts); i++ {
			require.Equal(t, ts[i-1]+1, ts[i], "%s: in order, no second missing or repeated: %v", f, ts)
		}
	}
}

// TestWSSinceFromTheArchive: a gateway recorded three streams (carried
// live, and their previous five minutes filled by an operator) into its
// Pebble archive and was stopped; started again on the same directory, a
// client asks for the three streams since five minutes before, and gets
// every second of each once, in order, then live ones, with no upstream
// call for a second the archive holds: only the seconds between the two
// runs are fetched. The replay is counted as a since and as read from
// the archive.
func TestWSSinceFromTheArchive(t *testing.T) {
	sim := fastSimulator(t)
	feeds := servertest.LiveFeeds(t, sim, upstreamsim.Mainnet, 3)
	dir := t.TempDir()
	rec := &upstreamReports{}
	cfg := pinnedArchive(t, dir, feeds)
	start := func() *servertest.Env {
		return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Upstream: rec.wrap, Config: cfg})
	}

	// The first run: the streams carried, and the five minutes before
	// filled.
	env := start()
	first := latest(t, env, feeds, 0)
	since := int64(0)
	for _, f := range feeds {
		if since == 0 || first[f]-300 < since {
			since = first[f] - 300
		}
	}
	for _, f := range feeds {
		fillArchive(t, env, f, since, first[f])
	}
	var mark int64 // the newest second every stream was carried to
	for _, ts := range latest(t, env, feeds, 0) {
		if mark == 0 || ts < mark {
			mark = ts
		}
	}
	require.NoError(t, env.Server.FlushArchive(t.Context()))
	require.NoError(t, env.Server.Close())
	rec.take()
	// What the archive holds now, read from its directory: the fill ends
	// a minute before it was asked (archive.FillSettle), so the seconds
	// between its end and the first carried may not be held (the hole
	// before the stream's span is filled in the background, maybe in the
	// next run).
	held := heldSeconds(t, dir, feeds, since)

	env = start()
	latest(t, env, feeds, mark+1) // carried again
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, ",") + "&since=" + strconv.FormatInt(since, 10)
	c, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, target, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	live := latest(t, env, feeds, 0)
	upTo := int64(0)
	for _, ts := range live {
		upTo = max(upTo, ts+2)
	}
	from := map[string]int64{}
	require.Eventually(t, func() bool {
		for _, f := range feeds {
			ts := w.of(f)
			if len(ts) == 0 || ts[len(ts)-1] < upTo {
				return false
			}
		}
		return true
	}, 120*time.Second, 20*time.Millisecond, "every stream received up to live second %d", upTo)
	for _, f := range feeds {
		from[f] = since
	}
	everySecondOnce(t, w, from, upTo)
	assert.Empty(t, rec.asking(t, held), "no upstream report call for a second the archive holds")
	labels := map[string]string{"network": upstreamsim.Mainnet}
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_since_total", labels))
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_resumed_total", labels))
	nheld := 0
	for _, secs := range held {
		nheld += len(secs)
	}
	require.Greater(t, nheld, 3*200, "the fill's four minutes held (it ends archive.FillSettle before it was asked)")
	assert.GreaterOrEqual(t, metricValue(t, env.Registry, "streamgate_ws_replayed_archive_total", labels), float64(nheld))
	assert.GreaterOrEqual(t, metricValue(t, env.Registry, "streamgate_ws_replayed_reports_total", labels), float64(3*(mark-since+1)))
}

// TestWSResumeBeyondTheHistoryFromTheArchive: a client's connection is
// lost while its gateway goes on recording its stream into the archive;
// the gateway is stopped, and started again on the same directory (the
// resume records in Redis). The client comes back: what it missed lies
// beyond the new hub's history, and is read from the archive, every
// second of it, even though it is longer than realtime.backfill_max
// (which bounds what is fetched from the upstream); no second the archive
// holds is asked of the upstream.
func TestWSResumeBeyondTheHistoryFromTheArchive(t *testing.T) {
	rs := redistest.New(t)
	sim := fastSimulator(t)
	feeds := servertest.LiveFeeds(t, sim, upstreamsim.Mainnet, 1)
	dir := t.TempDir()
	rec := &upstreamReports{}
	archived := pinnedArchive(t, dir, feeds)
	start := func() *servertest.Env {
		return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Upstream: rec.wrap, Config: func(c *config.Config) {
			archived(c)
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis.URL = rs.URL()
			c.Realtime.ShareLease = 900 * time.Millisecond
			c.Realtime.ResumeWindow = 10 * time.Minute
			c.Realtime.BackfillMax = time.Second
		}})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	target := "/api/v1/ws?feedIDs=" + feeds[0]

	env := start()
	c, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, target, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	awaitSeconds(t, w, feeds, 2)
	c.CloseNow() // lost: no close frame
	<-w.done
	from := lastOf(t, w, feeds)
	// The gateway records 15 seconds more, then stops.
	mark := latest(t, env, feeds, from[feeds[0]]+15)[feeds[0]]
	require.NoError(t, env.Server.FlushArchive(t.Context()))
	require.NoError(t, env.Server.Close())
	rec.take()
	held := heldSeconds(t, dir, feeds, from[feeds[0]]+1)
	require.GreaterOrEqual(t, int64(len(held[feeds[0]])), mark-from[feeds[0]], "the seconds recorded while the client was away")

	env = start()
	latest(t, env, feeds, mark+1) // carried again: its history starts after mark
	c2, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, target, "")
	require.NoError(t, err)
	w2 := readAll(t, ctx, c2)
	upTo := latest(t, env, feeds, 0)[feeds[0]] + 2
	require.Eventually(t, func() bool {
		ts := w2.of(feeds[0])
		return len(ts) > 0 && ts[len(ts)-1] >= upTo
	}, 60*time.Second, 20*time.Millisecond, "received up to live second %d", upTo)
	everySecondOnce(t, w2, map[string]int64{feeds[0]: from[feeds[0]] + 1}, upTo)
	assert.Empty(t, rec.asking(t, held), "no upstream report call for a second the archive holds")
	labels := map[string]string{"network": upstreamsim.Mainnet}
	assert.GreaterOrEqual(t, metricValue(t, env.Registry, "streamgate_ws_replayed_archive_total", labels), float64(mark-from[feeds[0]]))
	assert.Zero(t, metricValue(t, env.Registry, "streamgate_ws_since_total", labels), "a resume is not a since")
}

// TestWSSinceRefused: a since in the future, further back than
// realtime.since_max, older than the archive's retention, not a number,
// given twice, asking for more reports than a replay holds, or on a
// gateway whose since_max is 0, is a JSON 400 naming the bounds, before
// the upgrade and before any upstream call.
func TestWSSinceRefused(t *testing.T) {
	sim := fastSimulator(t)
	feeds := servertest.LiveFeeds(t, sim, upstreamsim.Mainnet, 3)
	env := servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
		noReplayCheck(c)
		c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, t.TempDir()
		c.Archive.Retention = 2 * time.Hour
		c.Realtime.SinceMax = 24 * time.Hour
	}})
	off := servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
		noReplayCheck(c)
		c.Realtime.SinceMax = 0
	}})
	calls := func() int64 { return sim.Counters().Sum(func(upstreamsim.Count) bool { return true }) }
	before := calls()
	now := time.Now().Unix()
	one, all := "feedIDs="+feeds[0], "feedIDs="+strings.Join(feeds, ",")
	for _, x := range []struct {
		base, query string
		says        []string
	}{
		{env.Mainnet, one + "&since=" + strconv.FormatInt(now+120, 10), []string{"in the future", "since must be whole Unix seconds from"}},
		{env.Mainnet, one + "&since=" + strconv.FormatInt(now-25*3600, 10), []string{"further back than realtime.since_max", "24h0m0s"}},
		{env.Mainnet, one + "&since=" + strconv.FormatInt(now-3*3600, 10), []string{"older than the archive's retention", "2h0m0s"}},
		{env.Mainnet, one + "&since=yesterday", []string{`since "yesterday" is not a Unix time in seconds`}},
		{env.Mainnet, one + "&since=", []string{"is not a Unix time in seconds"}},
		{env.Mainnet, one + "&since=" + strconv.FormatInt(now-60, 10) + "&since=" + strconv.FormatInt(now-30, 10), []string{"since given more than once"}},
		{env.Mainnet, all + "&since=" + strconv.FormatInt(now-3600, 10), []string{"at most 8192 reports at once", "3 streams"}},
		{off.Mainnet, one + "&since=" + strconv.FormatInt(now-60, 10), []string{"since is not enabled on this gateway (realtime.since_max is 0)"}},
	} {
		req, err := servertest.Demo().Request(t.Context(), x.base, "/api/v1/ws?"+x.query)
		require.NoError(t, err)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", x.query, body)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), x.query)
		var e struct{ Error string }
		require.NoError(t, json.Unmarshal(body, &e), "%s: %s", x.query, body)
		for _, s := range x.says {
			assert.Contains(t, e.Error, s, x.query)
		}
	}
	assert.Equal(t, before, calls(), "nothing went upstream for a refused since")
}

// TestWSSinceWithoutAnArchive: without an archive, a since within
// realtime.since_max is served from the hub's history and REST fills:
// every second from since once, in order, then live ones. The client's
// resume record (its lost connection's, newer than since) does not win
// over the since it asks for.
func TestWSSinceWithoutAnArchive(t *testing.T) {
	sim := fastSimulator(t)
	env := servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: noReplayCheck})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	feeds := []string{btc, eth}
	target := "/api/v1/ws?feedIDs=" + btc + "," + eth

	c, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, target, "")
	require.NoError(t, err)
	w := readAll(t, ctx, c)
	awaitSeconds(t, w, feeds, 3)
	c.CloseNow() // lost: its record would resume it after its last second
	<-w.done
	last := lastOf(t, w, feeds)
	since := w.of(btc)[0] - 20 // before the hub carried the streams
	for _, f := range feeds {
		since = min(since, w.of(f)[0]-20)
	}

	c2, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, target+"&since="+strconv.FormatInt(since, 10), "")
	require.NoError(t, err)
	w2 := readAll(t, ctx, c2)
	upTo := int64(0)
	for _, f := range feeds {
		upTo = max(upTo, last[f]+4)
	}
	require.Eventually(t, func() bool {
		for _, f := range feeds {
			ts := w2.of(f)
			if len(ts) == 0 || ts[len(ts)-1] < upTo {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "every stream received up to second %d", upTo)
	everySecondOnce(t, w2, map[string]int64{btc: since, eth: since}, upTo)
	labels := map[string]string{"network": upstreamsim.Mainnet}
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_ws_since_total", labels))
	assert.Positive(t, metricValue(t, env.Registry, "streamgate_ws_backfilled_seconds_total", labels), "the seconds before the history fetched over REST")
}
