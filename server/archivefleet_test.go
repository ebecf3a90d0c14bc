package server_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/testing/pgtest"
	"streamgate/internal/testing/redistest"
	"streamgate/internal/testing/replicaset"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// fleetClient reads a WebSocket client's frames: per stream, the fullReport
// of each second, and whether a second came twice.
type fleetClient struct {
	mu      sync.Mutex
	got     map[string]map[int64]string // feed → second → fullReport
	repeats int
	err     error
}

func (r *fleetClient) run(ctx context.Context, conn *websocket.Conn) {
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			r.mu.Lock()
			if ctx.Err() == nil {
				r.err = err
			}
			r.mu.Unlock()
			return
		}
		var f servertest.Frame
		if err := json.Unmarshal(data, &f); err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		m := r.got[f.Report.FeedID]
		if m == nil {
			m = map[int64]string{}
			r.got[f.Report.FeedID] = m
		}
		if _, ok := m[f.Report.ObservationsTimestamp]; ok {
			r.repeats++
		}
		m[f.Report.ObservationsTimestamp] = f.Report.FullReport
		r.mu.Unlock()
	}
}

// seconds returns how many seconds of feed r holds.
func (r *fleetClient) seconds(feed string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[feed])
}

// fleetUpstreamBody is the upstream's own answer to target, asked with the
// organisation's key.
func fleetUpstreamBody(t *testing.T, base, target string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+target, nil)
	require.NoError(t, err)
	auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// fleetRows returns the archive's rows of stream on testnet: second →
// fullReport as 0x-hex.
func fleetRows(t *testing.T, pg *pgtest.Server, feed string) map[int64]string {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pg.URL())
	require.NoError(t, err)
	cfg.Password = pgtest.Password
	c, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer c.Close(ctx)
	sb, err := hex.DecodeString(strings.TrimPrefix(feed, "0x"))
	require.NoError(t, err)
	rows, err := c.Query(ctx, "SELECT observations_ts, full_report FROM archive_reports WHERE network = 'testnet' AND stream = $1", sb)
	require.NoError(t, err)
	out := map[int64]string{}
	for rows.Next() {
		var ts int64
		var full []byte
		require.NoError(t, rows.Scan(&ts, &full))
		_, dup := out[ts]
		require.False(t, dup, "second %d of %s twice", ts, feed)
		out[ts] = "0x" + hex.EncodeToString(full)
	}
	require.NoError(t, rows.Err())
	return out
}

// fleetCovered reports whether one coverage span of the archive holds
// [from, to] of stream on testnet.
func fleetCovered(t *testing.T, pg *pgtest.Server, feed string, from, to int64) bool {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pg.URL())
	require.NoError(t, err)
	cfg.Password = pgtest.Password
	c, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer c.Close(ctx)
	sb, err := hex.DecodeString(strings.TrimPrefix(feed, "0x"))
	require.NoError(t, err)
	var n int
	require.NoError(t, c.QueryRow(ctx, "SELECT count(*) FROM archive_coverage WHERE network = 'testnet' AND stream = $1 AND from_ts <= $2 AND to_ts >= $3",
		sb, from, to).Scan(&n))
	return n > 0
}

// TestArchivePostgresFleetRecordsTheStreams: three replicas sharing one
// Redis (limits, cache tier, the upstream stream shared by one holder) and
// one PostgreSQL archive record the same streams, one pinned by the
// configuration and all three streamed by a WebSocket client on each
// replica, while the clients also ask a page and a report at a timestamp
// on each. Every second a client received is in PostgreSQL once, with the
// bytes the clients got; the seconds between the first and the last any
// client got are exactly those (none missing, none invented); the fleet
// wrote each row once (the others' writes of the same report counted as
// duplicates). All three stopped, a new replica (same Redis and
// PostgreSQL, no stream of its own) answers reports at seconds of the
// recorded span, a bulk and pages inside the span the polled page proved,
// none asked before (so in no cache), from PostgreSQL: HIT, each report
// verified again, zero upstream report calls, the upstream's bytes.
//
// It is a test of its own rather than an extension of
// TestArchivePostgresFleet, which shows the REST answers' rows without
// Redis or the stream (and stays the quick one to read): here the rows
// come from the stream, relayed between replicas by the shared hub.
func TestArchivePostgresFleetRecordsTheStreams(t *testing.T) {
	rs := redistest.New(t)
	pg := pgtest.New(t)
	sim := unlimitedSim(t)
	var feeds []string
	schemas := map[string]bool{}
	for _, s := range sim.Streams(upstreamsim.Testnet) {
		if s.Status == "live" && !schemas[s.SchemaVersion] && len(feeds) < 3 {
			feeds = append(feeds, s.FeedID)
			schemas[s.SchemaVersion] = true
		}
	}
	require.Len(t, feeds, 3, "three live streams of different schemas")
	pinned, err := feedid.Parse(feeds[0])
	require.NoError(t, err)
	replica := func(pin bool) *servertest.Env {
		return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
			replicaset.ShareRedis(c, config.RedisTarget{URL: rs.URL()})
			c.Server.AdminListen = "127.0.0.1:0"
			postgresArchive(pg)(&c.Archive)
			// A read slower than read_timeout goes upstream by design; a
			// loaded machine makes a new pool's first reads slow.
			c.Archive.ReadTimeout = 30 * time.Second
			if pin {
				c.Networks[upstreamsim.Testnet].Upstream.WSPinned = config.StreamIDs{pinned}
			}
		}})
	}
	var envs []*servertest.Env
	for range 3 {
		env := replica(true)
		waitArchiveOpen(t, env)
		envs = append(envs, env)
	}

	// A client on each replica streams the three streams.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var recs []*fleetClient
	var conns []*websocket.Conn
	var wg sync.WaitGroup
	for _, env := range envs {
		target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, ",")
		conn, _, err := servertest.Demo().DialWS(ctx, env.Testnet, target, "")
		require.NoError(t, err)
		conns = append(conns, conn)
		r := &fleetClient{got: map[string]map[int64]string{}}
		recs = append(recs, r)
		wg.Add(1)
		go func() { defer wg.Done(); r.run(ctx, conn) }()
	}

	// Each replica is also asked a complete page (its last report more
	// than a minute old: it proves its span) and a report at a timestamp.
	now := time.Now().Unix()
	pageStart := now - 200
	polled := []string{
		fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=100", feeds[1], pageStart),
		fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[2], now-150),
	}
	for _, env := range envs {
		for _, tg := range polled {
			st, _, body := get(t, env.Testnet, tg)
			require.Equal(t, http.StatusOK, st, body)
		}
	}

	// Record until every client has 6 seconds of every stream.
	require.Eventually(t, func() bool {
		for _, r := range recs {
			for _, f := range feeds {
				if r.seconds(f) < 6 {
					return false
				}
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond)
	cancel() // the readers end
	wg.Wait()
	for _, c := range conns {
		c.Close(websocket.StatusNormalClosure, "")
	}

	// What the clients got: per stream, the union of their seconds, the
	// same bytes for a second on every client.
	got := map[string]map[int64]string{}
	for i, r := range recs {
		require.NoError(t, r.err, "client %d", i)
		assert.Zero(t, r.repeats, "client %d got a second twice", i)
		for feed, m := range r.got {
			if got[feed] == nil {
				got[feed] = map[int64]string{}
			}
			for ts, full := range m {
				if w, ok := got[feed][ts]; ok {
					require.Equal(t, w, full, "%s at %d: the same report on every replica", feed, ts)
				}
				got[feed][ts] = full
			}
		}
	}

	// The pinned stream goes on until each replica stops; Close writes
	// what its Writer holds, so the counts are read after.
	written, duplicates := 0.0, 0.0
	for _, env := range envs {
		_ = env.Server.Close() // at once: its error says only that idle connections were cut
	}
	for _, env := range envs {
		written += servertest.MetricValue(t, env.Registry, "streamgate_archive_reports_written_total", nil)
		duplicates += servertest.MetricValue(t, env.Registry, "streamgate_archive_duplicates_total", nil)
	}

	// PostgreSQL holds every second the clients got, once, with their
	// bytes; between the first and the last of them, nothing else.
	total := 0
	recorded := map[string][]int64{} // feed → the seconds the clients got, ascending
	for _, feed := range feeds {
		held := fleetRows(t, pg, feed)
		total += len(held)
		secs := slices.Sorted(func(yield func(int64) bool) {
			for ts := range got[feed] {
				if !yield(ts) {
					return
				}
			}
		})
		require.NotEmpty(t, secs)
		// Every second the clients got, the first included (the hub's
		// newest report, handed to a client as it subscribes, perhaps
		// carried before the archive was open), is held with their bytes.
		for _, ts := range secs {
			_, ok := held[ts]
			if assert.True(t, ok, "%s at %d: a second a client got, archived by a replica", feed, ts) {
				assert.Equal(t, got[feed][ts], held[ts], "%s at %d: the row holds the bytes the clients got", feed, ts)
			}
		}
		recorded[feed] = secs
		for ts := range held {
			if ts >= secs[0] && ts <= secs[len(secs)-1] {
				_, ok := got[feed][ts]
				assert.True(t, ok, "%s at %d: a row between the recorded seconds that no client got", feed, ts)
			}
		}
	}
	n, distinct := rows(t, pg)
	assert.Equal(t, n, distinct, "one row per (stream, second)")
	assert.Equal(t, int64(total), n, "only the three streams' rows")
	assert.Equal(t, float64(n), written, "each row written once by the fleet (duplicates %v)", duplicates)
	assert.Positive(t, duplicates, "the replicas wrote the same reports: all but the first counted as duplicates")

	// The fleet's gap fills go through the bulk path, whose reports the
	// shared tier keeps by stream and second: a second the stream
	// delivered may be there too, and a new replica would take it from
	// Redis (MISS, no upstream call) instead of PostgreSQL. What follows
	// is about PostgreSQL: the tier's entries go, as their TTL would
	// take them.
	dropSharedEntries(t, rs.URL(), feeds, recorded)

	// A new replica, after the fleet: the recorded span from PostgreSQL.
	env := replica(false)
	waitArchiveOpen(t, env)
	// The new pool's first reads connect; on a loaded machine they may
	// outlast the request and go upstream, by design. Reports of the
	// polled page's span (each second once, so that no answer comes from
	// the memory cache; the pages below are other keys) warm it until one
	// is answered from the archive.
	warm := pageStart + 99
	require.Eventually(t, func() bool {
		st, xc, body := get(t, env.Testnet, fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[1], warm))
		require.Equal(t, http.StatusOK, st, body)
		warm--
		return xc == "HIT"
	}, time.Minute, 100*time.Millisecond)
	sim.ResetCounters()
	var asked []string
	for _, feed := range feeds {
		secs := recorded[feed]
		for _, ts := range []int64{secs[0], secs[len(secs)/2], secs[len(secs)-1]} {
			asked = append(asked, fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feed, ts))
		}
	}
	var both []int64 // the seconds every stream recorded
	for _, ts := range recorded[feeds[0]] {
		if slices.Contains(recorded[feeds[1]], ts) && slices.Contains(recorded[feeds[2]], ts) {
			both = append(both, ts)
		}
	}
	require.NotEmpty(t, both, "the streams were recorded at the same time")
	common := both[len(both)/2]
	asked = append(asked,
		fmt.Sprintf("/api/v1/reports/bulk?feedIDs=%s&timestamp=%d", strings.Join(feeds, ","), common),
		fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=50", feeds[1], pageStart+10),
		fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=90", feeds[1], pageStart+5),
	)
	bodies := map[string]string{}
	for _, tg := range asked {
		st, xc, body := get(t, env.Testnet, tg)
		require.Equal(t, http.StatusOK, st, body)
		assert.Equal(t, "HIT", xc, tg)
		bodies[tg] = body
	}
	assert.Equal(t, int64(0), reportCalls(sim), "no upstream report call")
	// The distinct reports served: 9 at a timestamp, 2 more in the bulk,
	// the 90 of the longer page (the shorter one is inside it).
	const served = 9 + 2 + 90
	assert.GreaterOrEqual(t, servertest.MetricValue(t, env.Registry, "streamgate_archive_reads_total", map[string]string{"result": "hit"}), float64(served),
		"every report read from PostgreSQL, in no cache")
	assert.GreaterOrEqual(t, servertest.MetricValue(t, env.Registry, "streamgate_reports_verified_total", map[string]string{"network": "testnet", "entry": "archive"}),
		float64(served), "each report read from PostgreSQL verified again")
	for _, tg := range asked {
		// The gateway answers a report and a bulk in the form its caches
		// keep, the upstream's records and a newline (proxy/records.go).
		assert.Equal(t, fleetUpstreamBody(t, env.UpTestnet, tg), strings.TrimSuffix(bodies[tg], "\n"), "the upstream's bytes: %s", tg)
	}
	for _, feed := range feeds {
		secs := recorded[feed]
		tg := fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feed, secs[len(secs)/2])
		var r servertest.Frame
		require.NoError(t, json.Unmarshal([]byte(bodies[tg]), &r))
		assert.Equal(t, got[feed][secs[len(secs)/2]], r.Report.FullReport, "the report the stream delivered")
	}

	// A page over the seconds only the stream carried is served from
	// PostgreSQL exactly when the archive's coverage holds them.
	secs := recorded[feeds[2]]
	tg := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feeds[2], secs[0], len(secs))
	sim.ResetCounters()
	covered := fleetCovered(t, pg, feeds[2], secs[0], secs[len(secs)-1])
	st, xc, body := get(t, env.Testnet, tg)
	require.Equal(t, http.StatusOK, st, body)
	if covered {
		assert.Equal(t, "HIT", xc, "a page inside the coverage the stream recorded")
		assert.Equal(t, int64(0), reportCalls(sim))
	} else {
		assert.Equal(t, "MISS", xc, "outside the coverage a page goes upstream")
		t.Logf("the streamed span %s [%d, %d] is not in the archive's coverage: its page went upstream", feeds[2], secs[0], secs[len(secs)-1])
	}
	assert.Equal(t, fleetUpstreamBody(t, env.UpTestnet, tg), strings.TrimSuffix(body, "\n"))
}

// TestArchivePostgresRecordsTheStreamFromBeforeItOpens: a gateway whose
// PostgreSQL archive cannot be opened yet (PostgreSQL down as it starts;
// in a fleet under load, the open merely slower than the first frame)
// carries its pinned stream at once, and a client streams it meanwhile,
// its first second the hub's newest report. Once PostgreSQL is up and the
// archive open, every second the client got is in PostgreSQL with its
// bytes, those of before the open included: the stream is recorded from
// its first second, nothing dropped.
func TestArchivePostgresRecordsTheStreamFromBeforeItOpens(t *testing.T) {
	pg := pgtest.New(t)
	pg.Stop()
	sim := unlimitedSim(t)
	feed := liveFeeds(t, sim, 1)[0]
	pinned, err := feedid.Parse(feed)
	require.NoError(t, err)
	env := servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
		c.Server.AdminListen = "127.0.0.1:0"
		postgresArchive(pg)(&c.Archive)
		c.Archive.ReadTimeout = 30 * time.Second
		c.Networks[upstreamsim.Testnet].Upstream.WSPinned = config.StreamIDs{pinned}
	}})
	require.Contains(t, env.Server.ArchiveHealth(), "not open")

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	conn, _, err := servertest.Demo().DialWS(ctx, env.Testnet, "/api/v1/ws?feedIDs="+feed, "")
	require.NoError(t, err)
	r := &fleetClient{got: map[string]map[int64]string{}}
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx, conn) }()

	// Three seconds streamed while the archive is not open (PostgreSQL is
	// down: it cannot be), then PostgreSQL back, the archive open, and
	// two more seconds after that.
	require.Eventually(t, func() bool { return r.seconds(feed) >= 3 }, time.Minute, 20*time.Millisecond)
	require.Contains(t, env.Server.ArchiveHealth(), "not open", "the seconds so far came before the archive opened")
	pg.Restart()
	waitArchiveOpen(t, env)
	opened := r.seconds(feed)
	require.Eventually(t, func() bool { return r.seconds(feed) >= opened+2 }, time.Minute, 20*time.Millisecond)
	cancel()
	<-done
	conn.Close(websocket.StatusNormalClosure, "")
	require.NoError(t, r.err)
	assert.Zero(t, r.repeats)
	require.NoError(t, env.Server.FlushArchive(context.Background()))

	r.mu.Lock()
	got := maps.Clone(r.got[feed])
	r.mu.Unlock()
	held := fleetRows(t, pg, feed)
	for _, ts := range slices.Sorted(maps.Keys(got)) {
		if _, ok := held[ts]; assert.True(t, ok, "%s at %d: a second the client got, archived", feed, ts) {
			assert.Equal(t, got[ts], held[ts], "%s at %d: the row holds the bytes the client got", feed, ts)
		}
	}
	assert.Zero(t, servertest.MetricValue(t, env.Registry, "streamgate_archive_dropped_total", map[string]string{"reason": "queue_full"}),
		"nothing held for the archive was lost")
}

// dropSharedEntries deletes the shared cache tier's entries from the
// Redis at url, logging those of the seconds recorded (by stream) that it
// held.
func dropSharedEntries(t *testing.T, url string, feeds []string, recorded map[string][]int64) {
	t.Helper()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	rc := redis.NewClient(opt)
	defer rc.Close()
	ctx := t.Context()
	for _, feed := range feeds {
		for _, ts := range recorded[feed] {
			key := shared.DefaultPrefix + "{" + cache.ReportKey(upstreamsim.Testnet, "", feed, ts) + "}"
			if n, err := rc.Exists(ctx, key).Result(); err == nil && n > 0 {
				t.Logf("%s at %d: the shared tier held the report (a gap fill's bulk)", feed, ts)
			}
		}
	}
	keys, err := rc.Keys(ctx, shared.DefaultPrefix+"*").Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, rc.Del(ctx, keys...).Err())
	}
}

// TestArchivePostgresKeepsTheAnswersFromBeforeItOpens: a gateway whose
// PostgreSQL archive cannot be opened yet (PostgreSQL down as it starts)
// answers REST requests from the upstream meanwhile; once PostgreSQL is
// up and the archive open, the reports of those answers are in it with
// their bytes (a report at a timestamp, a bulk, a page), and the span the
// complete page proved is in its coverage: nothing an answer brought
// before the open is lost, nothing counted as dropped.
func TestArchivePostgresKeepsTheAnswersFromBeforeItOpens(t *testing.T) {
	pg := pgtest.New(t)
	pg.Stop()
	sim := unlimitedSim(t)
	feeds := liveFeeds(t, sim, 3)
	env := servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
		c.Server.AdminListen = "127.0.0.1:0"
		postgresArchive(pg)(&c.Archive)
		c.Archive.ReadTimeout = 30 * time.Second
	}})
	require.Contains(t, env.Server.ArchiveHealth(), "not open")

	now := time.Now().Unix()
	ts, bulkTS, start := now-30, now-40, now-200
	reportT := fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[0], ts)
	bulkT := fmt.Sprintf("/api/v1/reports/bulk?feedIDs=%s,%s&timestamp=%d", feeds[1], feeds[2], bulkTS)
	pageT := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=20", feeds[2], start)
	want := map[string]map[int64]string{} // stream → second → fullReport, as answered
	var pageLast int64                    // the page's last second
	for _, target := range []string{reportT, bulkT, pageT} {
		st, xc, body := get(t, env.Testnet, target)
		require.Equal(t, http.StatusOK, st, body)
		require.Equal(t, "MISS", xc, target)
		type record struct {
			FeedID                string `json:"feedID"`
			ObservationsTimestamp int64  `json:"observationsTimestamp"`
			FullReport            string `json:"fullReport"`
		}
		var doc struct {
			Report  *record  `json:"report"`
			Reports []record `json:"reports"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
		rs := doc.Reports
		if doc.Report != nil {
			rs = append(rs, *doc.Report)
		}
		require.NotEmpty(t, rs, target)
		for _, r := range rs {
			if want[r.FeedID] == nil {
				want[r.FeedID] = map[int64]string{}
			}
			want[r.FeedID][r.ObservationsTimestamp] = r.FullReport
			if target == pageT {
				pageLast = max(pageLast, r.ObservationsTimestamp)
			}
		}
	}
	require.Contains(t, env.Server.ArchiveHealth(), "not open", "the answers came before the archive opened")

	pg.Restart()
	waitArchiveOpen(t, env)
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	require.Len(t, want, 3, "every stream asked was answered")
	for _, feed := range feeds {
		held := fleetRows(t, pg, feed)
		require.NotEmpty(t, want[feed], feed)
		for sec, full := range want[feed] {
			assert.Equal(t, full, held[sec], "%s at %d: the answer's report, archived", feed, sec)
		}
	}
	assert.True(t, spanCovers(t, pg, feedid.ID(feeds[2]), start, pageLast), "the span the complete page proved: [%d, %d]", start, pageLast)
	assert.Zero(t, servertest.MetricValue(t, env.Registry, "streamgate_archive_dropped_total", map[string]string{"reason": "queue_full"}),
		"nothing held for the archive was lost")
}
