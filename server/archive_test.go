package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/testing/pgtest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// targets records the REST targets the upstream receives.
type targets struct {
	mu  sync.Mutex
	got []string
}

func (r *targets) wrap(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/api/v1/reports") {
			r.mu.Lock()
			r.got = append(r.got, req.URL.RequestURI())
			r.mu.Unlock()
		}
		h.ServeHTTP(w, req)
	})
}

func (r *targets) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// archiveEnv starts a gateway on sim archiving into cfg's block.
func archiveEnv(t *testing.T, sim *upstreamsim.Simulator, rec *targets, archive func(*config.Archive)) *servertest.Env {
	t.Helper()
	return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Upstream: rec.wrap, Config: func(c *config.Config) {
		c.Server.AdminListen = "127.0.0.1:0"
		archive(&c.Archive)
	}})
}

// reportCalls counts the simulator's REST report calls (every report
// endpoint, every status).
func reportCalls(sim *upstreamsim.Simulator) int64 {
	return sim.Counters().Sum(func(c upstreamsim.Count) bool {
		return strings.HasPrefix(c.Endpoint, upstreamsim.EndpointReport)
	})
}

// get asks the gateway and returns status, X-Cache and body.
func get(t *testing.T, base, target string) (int, string, string) {
	t.Helper()
	resp, body := servertest.Demo().Get(t, base, target)
	return resp.StatusCode, resp.Header.Get("X-Cache"), string(body)
}

// TestArchivePebbleSurvivesARestart: a gateway archives the reports its
// REST answers brought (a report at a timestamp, a bulk answer, a
// complete page) into its Pebble directory; stopped and started again on
// the same directory, it answers the same requests, a page inside the
// span the first page proved complete, and a bulk whose streams it holds,
// from the archive: X-Cache HIT, no upstream call, the bytes the upstream
// answered. A bulk with one stream more asks the upstream for that one
// only. A second gateway on the directory is refused, naming why.
func TestArchivePebbleSurvivesARestart(t *testing.T) {
	sim := unlimitedSim(t)
	dir := t.TempDir()
	pebble := func(a *config.Archive) { a.Backend, a.Path = config.ArchiveBackendPebble, dir }
	rec := &targets{}
	env := archiveEnv(t, sim, rec, pebble)

	feeds := liveFeeds(t, sim, 4)
	now := time.Now().Unix()
	ts, bulkTS, start := now-30, now-40, now-200
	reportT := fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[0], ts)
	bulkT := fmt.Sprintf("/api/v1/reports/bulk?feedIDs=%s,%s,%s&timestamp=%d", feeds[0], feeds[1], feeds[2], bulkTS)
	pageT := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=20", feeds[1], start)
	innerT := fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=10", feeds[1], start+5)

	want := map[string]string{}
	for _, target := range []string{reportT, bulkT, pageT} {
		st, xc, body := get(t, env.Testnet, target)
		require.Equal(t, http.StatusOK, st, body)
		require.Equal(t, "MISS", xc, target)
		want[target] = body
	}
	require.Positive(t, reportCalls(sim))
	require.NoError(t, env.Server.FlushArchive(context.Background()))

	second, err := servertest.TryStart(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) { pebble(&c.Archive) }})
	require.Error(t, err, "a second gateway on the directory")
	assert.Nil(t, second)
	assert.Contains(t, err.Error(), "archive.path: "+dir+" is in use by another streamgate process")

	_ = env.Server.Close() // at once: its error says only that idle connections were cut
	rec.take()

	env = archiveEnv(t, sim, rec, pebble) // counters reset once it is warm
	for _, target := range []string{reportT, bulkT, pageT} {
		st, xc, body := get(t, env.Testnet, target)
		assert.Equal(t, http.StatusOK, st, target)
		assert.Equal(t, "HIT", xc, target)
		assert.Equal(t, want[target], body, "the upstream's bytes: %s", target)
	}
	st, xc, inner := get(t, env.Testnet, innerT)
	assert.Equal(t, http.StatusOK, st)
	assert.Equal(t, "HIT", xc, "a page inside the span the first page proved")
	assert.Equal(t, int64(0), reportCalls(sim), "no upstream call: %v", rec.take())

	// The upstream's own answer of the inner page is those bytes.
	up, err := http.NewRequest(http.MethodGet, env.UpTestnet+innerT, nil)
	require.NoError(t, err)
	auth.Sign(up, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
	resp, err := http.DefaultClient.Do(up)
	require.NoError(t, err)
	upBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, string(upBody), inner)
	sim.ResetCounters()
	rec.take()

	// A bulk with a stream more: only that one goes upstream.
	more := fmt.Sprintf("/api/v1/reports/bulk?feedIDs=%s,%s,%s,%s&timestamp=%d", feeds[0], feeds[1], feeds[2], feeds[3], bulkTS)
	st, _, body := get(t, env.Testnet, more)
	require.Equal(t, http.StatusOK, st, body)
	assert.Equal(t, []string{fmt.Sprintf("/api/v1/reports/bulk?feedIDs=%s&timestamp=%d", feeds[3], bulkTS)}, rec.take())
	for _, f := range feeds {
		assert.Contains(t, body, f)
	}

	// A page outside the span goes upstream.
	st, xc, _ = get(t, env.Testnet, fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=30", feeds[1], start))
	assert.Equal(t, http.StatusOK, st)
	assert.Equal(t, "MISS", xc, "[start, start+29] is not all covered")
}

// TestArchiveNeverKeepsAForgery: a report the upstream forged is never
// archived: in mode enforce it is refused (502); in mode report it is
// served (and counted) but not kept. After a restart the same requests go
// upstream again; what the honest upstream then answers is archived, and
// served from the archive after one more restart.
func TestArchiveNeverKeepsAForgery(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport} {
		t.Run(mode, func(t *testing.T) {
			sim := unlimitedSim(t)
			dir := t.TempDir()
			pebble := func(a *config.Archive) { a.Backend, a.Path = config.ArchiveBackendPebble, dir }
			start := func() *servertest.Env {
				return servertest.Start(t, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
					pebble(&c.Archive)
					c.Networks["testnet"].Verify.Mode = mode
				}})
			}
			env := start()
			feed := env.FeedID(t, upstreamsim.Testnet, "ETH", "USD", "V3")
			ts := time.Now().Unix() - 30
			targets := []string{
				fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feed, ts),
				fmt.Sprintf("/api/v1/reports/bulk?feedIDs=%s&timestamp=%d", feed, ts-1),
				fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=5", feed, ts-100),
			}
			wantForged := http.StatusBadGateway
			if mode == config.VerifyReport {
				wantForged = http.StatusOK
			}
			require.NoError(t, sim.SetFaults(upstreamsim.Faults{Forge: upstreamsim.ForgeSignature}))
			for _, tg := range targets {
				st, _, body := get(t, env.Testnet, tg)
				require.Equal(t, wantForged, st, body)
			}
			require.NoError(t, env.Server.FlushArchive(context.Background()))
			_ = env.Server.Close() // at once: its error says only that idle connections were cut
			require.NoError(t, sim.SetFaults(upstreamsim.Faults{}))

			env = start()
			for _, tg := range targets {
				st, xc, body := get(t, env.Testnet, tg)
				require.Equal(t, http.StatusOK, st, body)
				assert.Equal(t, "MISS", xc, "nothing forged was archived: %s", tg)
			}
			assert.Equal(t, int64(3), reportCalls(sim))
			require.NoError(t, env.Server.FlushArchive(context.Background()))
			_ = env.Server.Close() // at once: its error says only that idle connections were cut

			env = start()
			for _, tg := range targets {
				st, xc, body := get(t, env.Testnet, tg)
				require.Equal(t, http.StatusOK, st, body)
				assert.Equal(t, "HIT", xc, "the honest answer was archived: %s", tg)
			}
			assert.Equal(t, int64(0), reportCalls(sim))
		})
	}
}

// postgresArchive configures a gateway's archive on srv's database.
func postgresArchive(srv *pgtest.Server) func(*config.Archive) {
	return func(a *config.Archive) {
		a.Backend = config.ArchiveBackendPostgres
		a.Postgres.URL = srv.URL()
		a.Postgres.Password = pgtest.Password
	}
}

// waitArchiveOpen waits until the gateway's PostgreSQL archive is open.
func waitArchiveOpen(t *testing.T, env *servertest.Env) {
	t.Helper()
	require.Eventually(t, func() bool { return env.Server.ArchiveHealth() == "" }, 30*time.Second, 10*time.Millisecond,
		"archive not open: %s", env.Server.ArchiveHealth())
}

// pgConn connects to srv's database as the tests' archive does; the caller
// closes it.
func pgConn(t *testing.T, srv *pgtest.Server) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(srv.URL())
	require.NoError(t, err)
	cfg.Password = pgtest.Password
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	return c
}

// rows counts the archive's rows and its distinct (stream, second)s.
func rows(t *testing.T, srv *pgtest.Server) (n, distinct int64) {
	t.Helper()
	ctx := context.Background()
	c := pgConn(t, srv)
	defer c.Close(ctx)
	require.NoError(t, c.QueryRow(ctx, "SELECT count(*), count(DISTINCT (network, stream, observations_ts)) FROM archive_reports").Scan(&n, &distinct))
	return n, distinct
}

// TestArchivePostgresFleet: three gateways sharing one PostgreSQL archive
// (and no cache) are asked the same reports, one after the other: each
// answers the upstream's bytes, from the upstream or from what another
// already archived, and the archive holds one row per (stream, second),
// each written once (the others' writes counted as duplicates); all three stopped,
// a new gateway answers the same requests from PostgreSQL, verifying each
// report again: HIT, no upstream call, the upstream's bytes.
func TestArchivePostgresFleet(t *testing.T) {
	pg := pgtest.New(t)
	sim := unlimitedSim(t)
	feeds := liveFeeds(t, sim, 3)
	now := time.Now().Unix()
	asked := []string{
		fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[0], now-30),
		fmt.Sprintf("/api/v1/reports/bulk?feedIDs=%s,%s,%s&timestamp=%d", feeds[0], feeds[1], feeds[2], now-40),
		fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=20", feeds[1], now-200),
	}
	want := map[string]string{}
	var envs []*servertest.Env
	for range 3 {
		env := archiveEnv(t, sim, &targets{}, postgresArchive(pg))
		waitArchiveOpen(t, env)
		envs = append(envs, env)
	}
	for _, env := range envs {
		for _, tg := range asked {
			st, xc, body := get(t, env.Testnet, tg)
			require.Equal(t, http.StatusOK, st, body)
			require.Contains(t, []string{"MISS", "HIT"}, xc, "from the upstream, or from another's archived answer")
			if w, ok := want[tg]; ok {
				require.Equal(t, w, body)
			}
			want[tg] = body
		}
	}
	written := 0.0
	for _, env := range envs {
		require.NoError(t, env.Server.FlushArchive(context.Background()))
		written += servertest.MetricValue(t, env.Registry, "streamgate_archive_reports_written_total", nil)
		_ = env.Server.Close() // at once: its error says only that idle connections were cut
	}
	n, distinct := rows(t, pg)
	assert.Equal(t, int64(1+3+20), n, "one row per (stream, second)")
	assert.Equal(t, n, distinct)
	assert.Equal(t, float64(n), written, "each row written once by the fleet")

	// A read slower than read_timeout goes upstream by design; the first
	// reads of a new pool connect, which a loaded machine may make slow.
	env := archiveEnv(t, sim, &targets{}, func(a *config.Archive) {
		postgresArchive(pg)(a)
		a.ReadTimeout = 30 * time.Second
	})
	waitArchiveOpen(t, env)
	sim.ResetCounters()
	for _, tg := range asked {
		st, xc, body := get(t, env.Testnet, tg)
		assert.Equal(t, http.StatusOK, st, tg)
		assert.Equal(t, "HIT", xc, tg)
		assert.Equal(t, want[tg], body, tg)
	}
	assert.Equal(t, int64(0), reportCalls(sim))
	assert.Positive(t, servertest.MetricValue(t, env.Registry, "streamgate_reports_verified_total", map[string]string{"network": "testnet", "entry": "archive"}),
		"each report read from PostgreSQL verified again")
}

// TestArchivePostgresDown: PostgreSQL stopped while a client polls reports
// at timestamps: no request fails (each read gives up within read_timeout
// and the upstream answers), /readyz stays 200 and says "degraded:
// archive …", the writes that could not land are counted as dropped; once
// PostgreSQL is back, reads answer, /readyz is ready, and what is fetched
// is archived again.
func TestArchivePostgresDown(t *testing.T) {
	pg := pgtest.New(t)
	env := archiveEnv(t, nil, &targets{}, func(a *config.Archive) {
		postgresArchive(pg)(a)
		a.ReadTimeout = 100 * time.Millisecond
	})
	waitArchiveOpen(t, env)
	feed := env.FeedID(t, upstreamsim.Testnet, "ETH", "USD", "V3")
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + env.Server.Addr("admin") + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	ts := time.Now().Unix() - 250
	poll := func() {
		t.Helper()
		st, _, body := get(t, env.Testnet, fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feed, ts))
		require.Equal(t, http.StatusOK, st, body)
		ts++
	}
	poll()
	require.NoError(t, env.Server.FlushArchive(context.Background()))

	pg.Stop()
	require.Eventually(t, func() bool {
		poll()
		return strings.Contains(env.Server.ArchiveHealth(), "archive: reads fail")
	}, 30*time.Second, 10*time.Millisecond)
	st, body := readyz()
	assert.Equal(t, http.StatusOK, st, "the replica serves: it stays ready")
	assert.Contains(t, body, "degraded: archive: reads fail")
	for range 5 {
		poll()
	}
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	assert.Positive(t, servertest.MetricValue(t, env.Registry, "streamgate_archive_dropped_total", map[string]string{"reason": "store_error"}),
		"the writes that could not land are counted, each a hole")

	pg.Restart()
	require.Eventually(t, func() bool {
		poll()
		return env.Server.ArchiveHealth() == ""
	}, 60*time.Second, 10*time.Millisecond)
	st, body = readyz()
	assert.Equal(t, http.StatusOK, st)
	assert.Contains(t, body, `"ready"`)
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	before, _ := rows(t, pg)
	poll()
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	after, _ := rows(t, pg)
	assert.Equal(t, before+1, after, "archived again")
}

// unlimitedSim starts a simulator without its rate limit (the tests count
// upstream calls, not refusals), closed with tb.
func unlimitedSim(tb testing.TB) *upstreamsim.Simulator {
	tb.Helper()
	sim, err := upstreamsim.New(func() upstreamsim.Config { c := upstreamsim.Default(); c.RateLimit = 0; return c }())
	require.NoError(tb, err)
	tb.Cleanup(func() { sim.Close() })
	return sim
}

// liveFeeds returns the IDs of the first n live testnet streams of sim.
func liveFeeds(tb testing.TB, sim *upstreamsim.Simulator, n int) []string {
	tb.Helper()
	return servertest.LiveFeeds(tb, sim, upstreamsim.Testnet, n)
}
