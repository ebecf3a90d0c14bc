package server_test

import (
	"context"
	"encoding/hex"
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

	"streamgate/auth"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/testing/pgtest"
	"streamgate/realtime"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// pinnedEnv starts a gateway on sim that carries the stream pinned and
// archives per archive.
func pinnedEnv(t *testing.T, sim *upstreamsim.Simulator, rec *targets, pinned feedid.ID, mutate func(*config.Config)) *servertest.Env {
	t.Helper()
	return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Upstream: rec.wrap, Config: func(c *config.Config) {
		c.Server.AdminListen = "127.0.0.1:0"
		n := c.Networks[upstreamsim.Testnet]
		n.Upstream.WSPinned = config.StreamIDs{pinned}
		c.Networks[upstreamsim.Testnet] = n
		mutate(c)
	}})
}

// liveStream returns a live testnet stream of sim.
func liveStream(t *testing.T, sim *upstreamsim.Simulator) feedid.ID {
	t.Helper()
	for _, s := range sim.Streams(upstreamsim.Testnet) {
		if s.Status == "live" {
			id, err := feedid.Parse(s.FeedID)
			require.NoError(t, err)
			return id
		}
	}
	t.Fatal("no live testnet stream")
	return ""
}

// latestAtLeast waits until hub's newest report of feed is at least ts,
// and returns its second.
func latestAtLeast(t *testing.T, hub *realtime.Hub, feed feedid.ID, ts int64) int64 {
	t.Helper()
	var got int64
	require.Eventually(t, func() bool {
		_, got, _ = hub.Latest(feed)
		return got >= ts && got > 0
	}, 60*time.Second, 10*time.Millisecond, "the hub's newest report of %s reaches %d", feed, ts)
	return got
}

// holeCount returns the gateway's hole counters of state.
func holeCount(t *testing.T, env *servertest.Env, state string) (holes, seconds float64) {
	t.Helper()
	return servertest.MetricValue(t, env.Registry, "streamgate_archive_holes_total", map[string]string{"state": state}),
		servertest.MetricValue(t, env.Registry, "streamgate_archive_hole_seconds_total", map[string]string{"state": state})
}

// waitHoleFilled waits until the gateway filled n holes, recording its
// stream's claims meanwhile (FlushArchive) so that the holes are found.
func waitHoleFilled(t *testing.T, env *servertest.Env, n float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		require.NoError(t, env.Server.FlushArchive(context.Background()))
		failed, _ := holeCount(t, env, "failed")
		require.Zero(t, failed, "a hole's fill failed")
		filled, _ := holeCount(t, env, "filled")
		return filled >= n
	}, 90*time.Second, 50*time.Millisecond, "%v holes filled", n)
}

// pageFromArchive asks the gateway for the page of feed from start of limit
// reports: it must be answered from the archive (HIT) with the upstream's
// bytes and hold every second from start once, in order.
func pageFromArchive(t *testing.T, env *servertest.Env, feed feedid.ID, start, limit int64) string {
	t.Helper()
	target := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feed, start, limit)
	st, xc, body := get(t, env.Testnet, target)
	require.Equal(t, http.StatusOK, st, body)
	assert.Equal(t, "HIT", xc, "answered from the archive: %s", target)
	var page struct {
		Reports []struct {
			ObservationsTimestamp int64 `json:"observationsTimestamp"`
		} `json:"reports"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	require.Len(t, page.Reports, int(limit))
	for i, r := range page.Reports {
		require.Equal(t, start+int64(i), r.ObservationsTimestamp, "every second once, in order")
	}
	return body
}

// upstreamPage is the upstream's own answer to target.
func upstreamPage(t *testing.T, env *servertest.Env, target string) string {
	t.Helper()
	up, err := http.NewRequest(http.MethodGet, env.UpTestnet+target, nil)
	require.NoError(t, err)
	auth.Sign(up, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
	resp, err := http.DefaultClient.Do(up)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// TestArchiveStreamCoverageAfterARestart: the seconds a pinned stream
// carried are covered (the hub vouches for each second after the one
// before), so that after a restart on the same Pebble directory a page
// inside them is answered from the archive, HIT, with no upstream call and
// the upstream's bytes; the seconds the gateway was stopped are a hole,
// found when the stream is carried again and filled from the upstream's
// pages, so that a page over both runs and the stop between is answered
// from the archive too, every second once.
func TestArchiveStreamCoverageAfterARestart(t *testing.T) {
	sim, err := upstreamsim.New(func() upstreamsim.Config { c := upstreamsim.Default(); c.RateLimit = 0; return c }())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	feed := liveStream(t, sim)
	dir := t.TempDir()
	rec := &targets{}
	pebble := func(c *config.Config) { c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, dir }

	env := pinnedEnv(t, sim, rec, feed, pebble)
	hub := env.Server.Hub(upstreamsim.Testnet)
	first := latestAtLeast(t, hub, feed, 0)
	latestAtLeast(t, hub, feed, first+10)
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	_, stopped, _ := hub.Latest(feed)
	_ = env.Server.Close() // at once: its error says only that idle connections were cut
	filled, _ := holeCount(t, env, "filled")
	require.Zero(t, filled, "no hole on the first run: the stream was never recorded before")
	// The gateway stays stopped a few seconds: a hole the restarted one
	// finds.
	require.Eventually(t, func() bool { return time.Now().Unix() >= stopped+4 }, 10*time.Second, 10*time.Millisecond)

	env = pinnedEnv(t, sim, rec, feed, pebble)
	hub = env.Server.Hub(upstreamsim.Testnet)
	waitHoleFilled(t, env, 1)
	found, foundSecs := holeCount(t, env, "found")
	assert.Equal(t, float64(1), found)
	assert.GreaterOrEqual(t, foundSecs, float64(3), "the seconds the gateway was stopped")
	last := latestAtLeast(t, hub, feed, stopped+6)
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	sim.ResetCounters()
	rec.take()

	inner := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=5", feed, first+2)
	innerBody := pageFromArchive(t, env, feed, first+2, 5)
	whole := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feed, first, last-first+1)
	wholeBody := pageFromArchive(t, env, feed, first, last-first+1)
	assert.Equal(t, int64(0), reportCalls(sim), "no upstream call: %v", rec.take())
	assert.Equal(t, upstreamPage(t, env, inner), innerBody, "the upstream's bytes")
	assert.Equal(t, upstreamPage(t, env, whole), wholeBody, "the upstream's bytes")
}

// TestArchiveStreamGapUnfilledIsAHole: seconds of a gap the hub counted
// unfilled (backfill_max 0: none fetched) are never inside the stream's
// coverage: they are the one hole found, of exactly those seconds, filled
// from the upstream's pages; afterwards a page over the gap is answered
// from the archive, every second once.
func TestArchiveStreamGapUnfilledIsAHole(t *testing.T) {
	sim, err := upstreamsim.New(func() upstreamsim.Config { c := upstreamsim.Default(); c.RateLimit = 0; return c }())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	feed := liveStream(t, sim)
	rec := &targets{}
	env := pinnedEnv(t, sim, rec, feed, func(c *config.Config) {
		c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, t.TempDir()
		c.Realtime.BackfillMax = 0
	})
	hub := env.Server.Hub(upstreamsim.Testnet)
	first := latestAtLeast(t, hub, feed, 0)
	before := latestAtLeast(t, hub, feed, first+3)
	sim.Outage(3 * time.Second)
	require.Eventually(t, func() bool { return hub.Stats().Unfilled > 0 }, 60*time.Second, 10*time.Millisecond, "the gap counted unfilled")
	waitHoleFilled(t, env, 1)
	unfilled := hub.Stats().Unfilled
	found, foundSecs := holeCount(t, env, "found")
	assert.Equal(t, float64(1), found, "one hole")
	assert.Equal(t, float64(unfilled), foundSecs, "the hole is the seconds counted unfilled, no more, no less")
	last := latestAtLeast(t, hub, feed, before+int64(unfilled)+3)
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	sim.ResetCounters()
	rec.take()
	pageFromArchive(t, env, feed, first, last-first+1)
	assert.Equal(t, int64(0), reportCalls(sim), "no upstream call: %v", rec.take())
}

// TestArchiveStreamHoleFilledAfterPostgresOutage: PostgreSQL stopped for
// ten seconds while a WebSocket client streams and a REST client polls
// reports at timestamps: neither sees an error (the stream does not wait
// on the archive; reads fall through to the upstream), every second
// reaches the stream client once; the reports the Writer could not store
// are counted, and once PostgreSQL is back the hole they left in the
// stream's coverage is found and filled from the upstream's pages: a page
// over the whole span, before, during and after the outage, is answered
// from the archive with no upstream call, every second once.
func TestArchiveStreamHoleFilledAfterPostgresOutage(t *testing.T) {
	pg := pgtest.New(t) // its own server: the test stops it
	sim, err := upstreamsim.New(func() upstreamsim.Config { c := upstreamsim.Default(); c.RateLimit = 0; return c }())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	feed := liveStream(t, sim)
	rec := &targets{}
	env := pinnedEnv(t, sim, rec, feed, func(c *config.Config) {
		postgresArchive(pg)(&c.Archive)
		// A read that outlasts the bound goes upstream, by design: on a
		// loaded machine a read of PostgreSQL outlasts 100 ms, and the
		// page asked at the end went upstream (MISS). The outage does
		// not need a short bound: the stopped server refuses
		// connections at once, so no request waits on it.
		c.Archive.ReadTimeout = 30 * time.Second
	})
	waitArchiveOpen(t, env)
	hub := env.Server.Hub(upstreamsim.Testnet)

	// A stream client and a REST client, until stop.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var streamed []int64
	var streamErr error
	conn, resp, err := servertest.Demo().DialWS(ctx, env.Testnet, "/api/v1/ws?feedIDs="+string(feed), "")
	require.NoError(t, err)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	defer conn.CloseNow()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				if ctx.Err() == nil {
					streamErr = err
				}
				return
			}
			var f servertest.Frame
			if err := json.Unmarshal(data, &f); err != nil {
				streamErr = err
				return
			}
			streamed = append(streamed, f.Report.ObservationsTimestamp)
		}
	}()
	var polls int
	var pollErrs []string
	go func() {
		defer wg.Done()
		// A report at a timestamp every 20 ms, each a second not asked
		// before (a miss of the memory cache: the archive's read first).
		ts := time.Now().Unix() - 3600
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil && ts < time.Now().Unix()-30 {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			req, err := servertest.Demo().Request(ctx, env.Testnet, fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feed, ts))
			if err != nil {
				pollErrs = append(pollErrs, err.Error())
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					pollErrs = append(pollErrs, err.Error())
				}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				pollErrs = append(pollErrs, resp.Status)
			}
			polls++
			ts++
		}
	}()

	// The stream's coverage starts at the first report the archive got
	// from it: not the hub's newest when the test looks, which may have
	// come before the archive opened (PostgreSQL opens in the background)
	// and is then no second of the archive's, nor a hole (the stream was
	// carried for the first time).
	latestAtLeast(t, hub, feed, latestAtLeast(t, hub, feed, 0)+3)
	var first int64
	require.Eventually(t, func() bool {
		require.NoError(t, env.Server.FlushArchive(context.Background()))
		var ok bool
		first, ok = coverageStart(t, pg, feed)
		return ok
	}, 60*time.Second, 10*time.Millisecond, "a span of the stream recorded before the outage")

	pg.Stop()
	down := time.Now()
	require.Eventually(t, func() bool {
		return servertest.MetricValue(t, env.Registry, "streamgate_archive_dropped_total", map[string]string{"reason": "store_error"}) > 0
	}, 60*time.Second, 10*time.Millisecond, "the reports the store could not take are dropped")
	require.Eventually(t, func() bool { return time.Since(down) >= 10*time.Second }, 30*time.Second, 10*time.Millisecond)
	pg.Restart()

	waitArchiveOpen(t, env)
	waitHoleFilled(t, env, 1)
	require.Eventually(t, func() bool {
		require.NoError(t, env.Server.FlushArchive(context.Background()))
		found, _ := holeCount(t, env, "found")
		filled, _ := holeCount(t, env, "filled")
		return filled == found
	}, 60*time.Second, 50*time.Millisecond, "every hole found is filled")
	_, foundSecs := holeCount(t, env, "found")
	assert.Positive(t, foundSecs, "the seconds whose reports were dropped")
	stop()
	conn.CloseNow()
	wg.Wait()
	// The stream's coverage holds one span over the whole test, the
	// outage's seconds filled (read in PostgreSQL: a page asked now could
	// go upstream and prove the span itself).
	last := latestAtLeast(t, hub, feed, 0)
	require.Eventually(t, func() bool {
		require.NoError(t, env.Server.FlushArchive(context.Background()))
		return spanCovers(t, pg, feed, first, last)
	}, 90*time.Second, 50*time.Millisecond, "one span of the stream's coverage over [%d, %d]", first, last)

	assert.NoError(t, streamErr, "the stream client")
	assert.Empty(t, pollErrs, "the REST client")
	assert.Positive(t, polls)
	require.NotEmpty(t, streamed)
	for i := 1; i < len(streamed); i++ {
		require.Equal(t, streamed[i-1]+1, streamed[i], "every second streamed once, in order")
	}

	rec.take()
	pageFromArchive(t, env, feed, first, last-first+1)
	// The REST client's last request may reach the upstream after it
	// gave up (a fill is not cancelled by a waiter that leaves): only its
	// seconds, all before the stream's.
	for _, target := range rec.take() {
		u, err := url.Parse(target)
		require.NoError(t, err)
		ts, _ := strconv.ParseInt(u.Query().Get("timestamp"), 10, 64)
		assert.True(t, u.Path == "/api/v1/reports" && ts < first, "no upstream call for the page: %s", target)
	}
}

// coverageStart returns the first second of feed's coverage in srv's
// archive, and whether it has any.
func coverageStart(t *testing.T, srv *pgtest.Server, feed feedid.ID) (int64, bool) {
	t.Helper()
	ctx := context.Background()
	c := pgConn(t, srv)
	defer c.Close(ctx)
	sb, err := hex.DecodeString(strings.TrimPrefix(string(feed), "0x"))
	require.NoError(t, err)
	var from *int64
	require.NoError(t, c.QueryRow(ctx, `SELECT min(from_ts) FROM archive_coverage WHERE network = 'testnet' AND stream = $1`, sb).Scan(&from))
	if from == nil {
		return 0, false
	}
	return *from, true
}

// spanCovers reports whether one span of feed's coverage in srv's archive
// holds [from, to].
func spanCovers(t *testing.T, srv *pgtest.Server, feed feedid.ID, from, to int64) bool {
	t.Helper()
	ctx := context.Background()
	c := pgConn(t, srv)
	defer c.Close(ctx)
	sb, err := hex.DecodeString(strings.TrimPrefix(string(feed), "0x"))
	require.NoError(t, err)
	var n int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM archive_coverage WHERE network = 'testnet' AND stream = $1 AND from_ts <= $2 AND to_ts >= $3`,
		sb, from, to).Scan(&n))
	return n > 0
}
