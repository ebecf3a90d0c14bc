package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
	"streamgate/usage"
)

// counted is what the clients of one team counted, as the ledger should.
type counted struct {
	requests    map[string]map[string]int64 // endpoint → class
	reports     int64
	frames      int64
	calls       int64
	restBytes   int64
	streamBytes int64
}

// tally is the clients' count of every team.
type tally struct {
	mu    sync.Mutex
	teams map[string]*counted
}

func newTally() *tally { return &tally{teams: map[string]*counted{}} }

func (t *tally) of(team string) *counted {
	c := t.teams[team]
	if c == nil {
		c = &counted{requests: map[string]map[string]int64{}}
		t.teams[team] = c
	}
	return c
}

func (t *tally) request(team, endpoint string, status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.of(team)
	if c.requests[endpoint] == nil {
		c.requests[endpoint] = map[string]int64{}
	}
	c.requests[endpoint][usage.ClassOf(status)]++
}

// rest sends a signed GET of target, an endpoint's, and counts what the
// ledger should: the request and its class, the reports of a 200, the
// body's bytes, and an upstream call when the answer says the request
// made one (X-Cache: MISS on a report, bulk or page answer; each makes at
// most one call here: no retries, bulks within max_bulk).
func (t *tally) rest(tb testing.TB, c *servertest.Client, team, base, endpoint, target string) *http.Response {
	tb.Helper()
	resp, body := c.Get(tb, base, target)
	t.request(team, endpoint, resp.StatusCode)
	t.mu.Lock()
	defer t.mu.Unlock()
	ct := t.of(team)
	ct.restBytes += int64(len(body))
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
		switch endpoint {
		case "reports", "latest":
			ct.reports++
		case "bulk", "page":
			var b struct {
				Reports []json.RawMessage `json:"reports"`
			}
			require.NoError(tb, json.Unmarshal(body, &b))
			ct.reports += int64(len(b.Reports))
		}
	}
	if resp.Header.Get("X-Cache") == "MISS" {
		ct.calls++
	}
	return resp
}

// frameBytes is what a server frame of n bytes of payload takes on the
// wire (RFC 6455 section 5.2: 2, 4 or 10 bytes of header).
func frameBytes(n int) int64 {
	switch {
	case n < 126:
		return int64(2 + n)
	case n < 1<<16:
		return int64(4 + n)
	}
	return int64(10 + n)
}

// streamClient reads a stream until the gateway closes it, counting its
// frames and bytes into t (the upgrade itself when it ends).
type streamClient struct {
	frames chan struct{} // a signal per frame
	done   chan error
}

func (t *tally) stream(tb testing.TB, c *servertest.Client, team, base, feed string) *streamClient {
	tb.Helper()
	ctx := tb.Context()
	conn, _, err := c.DialWS(ctx, base, "/api/v1/ws?feedIDs="+feed, "")
	require.NoError(tb, err)
	conn.SetReadLimit(1 << 20)
	sc := &streamClient{frames: make(chan struct{}, 1<<16), done: make(chan error, 1)}
	go func() {
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				t.request(team, "ws", http.StatusSwitchingProtocols)
				sc.done <- err
				return
			}
			t.mu.Lock()
			ct := t.of(team)
			ct.frames++
			ct.streamBytes += frameBytes(len(data))
			t.mu.Unlock()
			sc.frames <- struct{}{}
		}
	}()
	tb.Cleanup(func() { conn.CloseNow() })
	return sc
}

// waitFrames waits for n frames.
func (sc *streamClient) waitFrames(tb testing.TB, n int) {
	tb.Helper()
	for range n {
		select {
		case <-sc.frames:
		case err := <-sc.done:
			tb.Fatalf("the stream ended after fewer than %d frames: %v", n, err)
		case <-tb.Context().Done():
			tb.Fatal("test ended")
		}
	}
}

// ended waits for the gateway to close the stream (1001: it drains).
func (sc *streamClient) ended(tb testing.TB) {
	tb.Helper()
	select {
	case err := <-sc.done:
		var ce websocket.CloseError
		require.True(tb, errors.As(err, &ce), "the stream ended with %v, not the gateway's close", err)
		assert.Equal(tb, websocket.StatusGoingAway, ce.Code)
	case <-tb.Context().Done():
		tb.Fatal("the stream did not end")
	}
}

// usageRows reads /usage.json from a gateway's admin listener.
func usageRows(tb testing.TB, admin, query string) (int, []usage.Row, []byte) {
	tb.Helper()
	resp, err := http.Get("http://" + admin + "/usage.json" + query)
	require.NoError(tb, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(tb, err)
	var ans struct {
		Rows []usage.Row `json:"rows"`
	}
	if resp.StatusCode == http.StatusOK {
		require.NoError(tb, json.Unmarshal(body, &ans), "%s", body)
	}
	return resp.StatusCode, ans.Rows, body
}

// assertLedger checks that the ledger's rows of days equal the clients'
// count, per team (summed over the days the run took: one, unless it
// crossed midnight UTC).
func assertLedger(t *testing.T, want *tally, rows []usage.Row, network string, days ...string) {
	t.Helper()
	got := newTally()
	for _, r := range rows {
		require.Contains(t, days, r.Day, "a row of a day the run did not take")
		require.Equal(t, network, r.Network)
		c := got.of(r.Team)
		for ep, classes := range r.ByEndpoint {
			if c.requests[ep] == nil {
				c.requests[ep] = map[string]int64{}
			}
			for class, n := range classes {
				c.requests[ep][class] += n
			}
		}
		c.reports += r.Reports
		c.frames += r.Frames
		c.calls += r.UpstreamCalls
		c.restBytes += r.RESTBytes
		c.streamBytes += r.StreamBytes
		assert.Equal(t, r.RESTBytes+r.StreamBytes, r.Bytes)
	}
	for team, w := range want.teams {
		g := got.of(team)
		assert.Equal(t, w.requests, g.requests, "team %s: requests by endpoint and class", team)
		assert.Equal(t, w.reports, g.reports, "team %s: REST reports", team)
		assert.Equal(t, w.frames, g.frames, "team %s: frames", team)
		assert.Equal(t, w.calls, g.calls, "team %s: upstream calls", team)
		assert.Equal(t, w.restBytes, g.restBytes, "team %s: REST bytes", team)
		assert.Equal(t, w.streamBytes, g.streamBytes, "team %s: stream bytes", team)
	}
	for team := range got.teams {
		assert.Contains(t, want.teams, team, "the ledger has a team no client was")
	}
}

// ledgerConfig is the configuration of a replica of the ledger tests: the
// admin listener on a free port, the research team unlimited (its
// requests are all answered), no replay check (a test repeats a request
// within a second), no stream sharing and no drain delay (a replica's
// stream clients are closed as soon as it stops), and the limits, and so
// the ledger, in Redis when url is given.
func ledgerConfig(url string) func(*config.Config) {
	return func(c *config.Config) {
		c.Server.AdminListen = "127.0.0.1:0"
		c.Auth.ReplayProtection = false
		c.Teams[1].Rate = config.Rate{}
		c.Realtime.Share = false
		c.Realtime.DrainDelay = 0
		if url != "" {
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis.URL = url
		}
	}
}

// restTraffic sends each team's mix of REST requests to one replica:
// reports at timestamps of their own (a miss, then a hit), a bulk, a page,
// a malformed timestamp (400) and an unknown path (404).
func restTraffic(t *testing.T, counts *tally, base string, round int) {
	feeds := config.DemoRestrictedFeeds()
	now := time.Now().Unix()
	for i, team := range []string{config.DemoTeam, config.ResearchTeam} {
		c := servertest.Demo()
		if team == config.ResearchTeam {
			c = servertest.Research()
		}
		ts := strconv.FormatInt(now-120-int64(10*round+i), 10)
		for range 2 { // a miss, then a hit
			counts.rest(t, c, team, base, "reports", "/api/v1/reports?feedID="+string(feeds[0])+"&timestamp="+ts)
		}
		counts.rest(t, c, team, base, "bulk", "/api/v1/reports/bulk?feedIDs="+string(feeds[1])+","+string(feeds[2])+"&timestamp="+ts)
		counts.rest(t, c, team, base, "page", "/api/v1/reports/page?feedID="+string(feeds[3])+"&startTimestamp="+ts+"&limit=3")
		counts.rest(t, c, team, base, "reports", "/api/v1/reports?feedID="+string(feeds[0])+"&timestamp=soon")
		// Refused before authentication: the ledger knows no team for it.
		counts.rest(t, c, "", base, "other", "/api/v1/nothing-here")
	}
}

// TestUsageLedgerAcrossReplicasAndRestart: two teams' known traffic, REST
// and stream, over three replicas sharing Redis, one of them restarted
// midway: the ledger read from any replica's /usage.json equals, per team
// and day, what the clients counted (requests by endpoint and class,
// reports, frames, upstream calls, bytes).
func TestUsageLedgerAcrossReplicasAndRestart(t *testing.T) {
	rs := redistest.New(t)
	sim, err := upstreamsim.New(func() upstreamsim.Config {
		c := upstreamsim.Default()
		c.RateLimit = 0
		c.WSTick = 50 * time.Millisecond
		return c
	}())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	start := func() *servertest.Env {
		return servertest.Start(t, servertest.Options{Quiet: true, Simulator: sim, Config: ledgerConfig(rs.URL())})
	}
	firstDay := time.Now().UTC().Format(usage.DayLayout)
	envs := []*servertest.Env{start(), start(), start()}
	counts := newTally()
	feeds := config.DemoRestrictedFeeds()

	// A stream per team, on the replicas that will stop.
	demoStream := counts.stream(t, servertest.Demo(), config.DemoTeam, envs[0].Testnet, string(feeds[0]))
	researchStream := counts.stream(t, servertest.Research(), config.ResearchTeam, envs[2].Testnet, string(feeds[1]))
	for i, e := range envs {
		restTraffic(t, counts, e.Testnet, i)
	}
	demoStream.waitFrames(t, 3)
	researchStream.waitFrames(t, 3)

	// The restart: replica 0 drains (its stream client is closed) and a
	// new one takes its place, on the same Redis.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, envs[0].Server.Shutdown(ctx))
	demoStream.ended(t)
	envs[0] = start()
	restTraffic(t, counts, envs[0].Testnet, 3)
	restTraffic(t, counts, envs[1].Testnet, 4)

	// Replicas 0 and 2 stop (their tallies are flushed as they do); the
	// ledger is read from replica 1, which flushes its own first.
	require.NoError(t, envs[2].Server.Shutdown(ctx))
	researchStream.ended(t)
	require.NoError(t, envs[0].Server.Shutdown(ctx))
	lastDay := time.Now().UTC().Format(usage.DayLayout)
	status, rows, body := usageRows(t, envs[1].Server.Addr("admin"), "?from="+firstDay+"&to="+lastDay)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assertLedger(t, counts, rows, "testnet", firstDay, lastDay)
	require.Positive(t, counts.of(config.DemoTeam).frames)
	require.Positive(t, counts.of(config.ResearchTeam).calls)

	// One team's rows alone.
	status, rows, body = usageRows(t, envs[1].Server.Addr("admin"), "?from="+firstDay+"&to="+lastDay+"&team="+config.ResearchTeam)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NotEmpty(t, rows)
	for _, r := range rows {
		assert.Equal(t, config.ResearchTeam, r.Team)
	}

	// The day's hash expires after the retention.
	opt, err := redis.ParseURL(rs.URL())
	require.NoError(t, err)
	rc := redis.NewClient(opt)
	defer rc.Close()
	ttl, err := rc.TTL(t.Context(), usage.DefaultPrefix+"{"+firstDay+"}").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, usage.Retention-time.Hour)
	assert.LessOrEqual(t, ttl, usage.Retention+24*time.Hour)
}

// TestUsageMemoryLedger: without Redis the ledger is the replica's own, in
// memory; /usage.json says so (shared: false) and its figures are the
// clients'.
func TestUsageMemoryLedger(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: ledgerConfig("")})
	day := time.Now().UTC().Format(usage.DayLayout)
	counts := newTally()
	restTraffic(t, counts, env.Testnet, 0)
	status, rows, body := usageRows(t, env.Server.Addr("admin"), "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Contains(t, string(body), `"shared": false`)
	assertLedger(t, counts, rows, "testnet", day, time.Now().UTC().Format(usage.DayLayout))
}

// TestUsageCoalescedCallCountsOnce: two teams asking for the same report at
// once make one upstream call, counted once, to the team of the request
// that made it (its answer says MISS; the others waited on it, COALESCED,
// or came after it, HIT).
func TestUsageCoalescedCallCountsOnce(t *testing.T) {
	hold := make(chan struct{})
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: ledgerConfig(""),
		Upstream: func(_ string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == upstreamsim.EndpointReport {
					<-hold // the call waits until every client has sent its request
				}
				h.ServeHTTP(w, r)
			})
		}})
	feed := string(config.DemoRestrictedFeeds()[0])
	target := "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(time.Now().Unix()-60, 10)
	const each = 4
	type answer struct {
		team, cache string
		status      int
	}
	answers := make(chan answer, 2*each)
	var sent, wg sync.WaitGroup
	for i := range 2 * each {
		c, team := servertest.Demo(), config.DemoTeam
		if i%2 == 1 {
			c, team = servertest.Research(), config.ResearchTeam
		}
		sent.Add(1)
		wg.Go(func() {
			req, err := c.Request(t.Context(), env.Testnet, target)
			if !assert.NoError(t, err) {
				sent.Done()
				return
			}
			sent.Done()
			resp, err := c.HTTP.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers <- answer{team, resp.Header.Get("X-Cache"), resp.StatusCode}
		})
	}
	sent.Wait()
	close(hold)
	wg.Wait()
	close(answers)
	missBy := ""
	for a := range answers {
		require.Equal(t, http.StatusOK, a.status)
		require.Contains(t, []string{"MISS", "COALESCED", "HIT"}, a.cache)
		if a.cache == "MISS" {
			require.Empty(t, missBy, "one request made the call")
			missBy = a.team
		}
	}
	require.NotEmpty(t, missBy)
	require.EqualValues(t, 1, env.Sim.Counters().ByEndpoint(upstreamsim.Testnet, upstreamsim.EndpointReport))
	status, rows, body := usageRows(t, env.Server.Addr("admin"), "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Len(t, rows, 2)
	for _, r := range rows {
		assert.EqualValues(t, each, r.ByEndpoint["reports"]["2xx"], "team %s", r.Team)
		assert.EqualValues(t, each, r.Reports, "team %s", r.Team)
		if r.Team == missBy {
			assert.EqualValues(t, 1, r.UpstreamCalls, "the call, to the team whose request made it")
		} else {
			assert.Zero(t, r.UpstreamCalls, "team %s only waited", r.Team)
		}
	}
}

// TestUsageJSONParameters: /usage.json refuses a bad parameter with a 400
// JSON error, and defaults to today.
func TestUsageJSONParameters(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: ledgerConfig("")})
	admin := env.Server.Addr("admin")
	for _, q := range []string{
		"?from=2026-13-01",
		"?from=yesterday",
		"?to=2026-1-1",
		"?from=2026-02-01&to=2026-01-31",
		"?from=2020-01-01&to=2026-01-01",
		"?team=nobody",
		"?team=",
		"?day=2026-01-01",
		"?from=2026-01-01&from=2026-01-02",
	} {
		status, _, body := usageRows(t, admin, q)
		assert.Equal(t, http.StatusBadRequest, status, "%s: %s", q, body)
		var e struct{ Error, Message string }
		if assert.NoError(t, json.Unmarshal(body, &e), "%s: %s", q, body) {
			assert.NotEmpty(t, e.Error, q)
		}
	}
	status, rows, body := usageRows(t, admin, "?team="+config.DemoTeam)
	require.Equal(t, http.StatusOK, status, "%s", body)
	assert.Empty(t, rows)
	today := time.Now().UTC().Format(usage.DayLayout)
	var ans struct{ From, To string }
	require.NoError(t, json.Unmarshal(body, &ans))
	if ans.From != today { // midnight passed between the two readings
		require.Equal(t, time.Now().UTC().Format(usage.DayLayout), ans.From)
	}
	assert.Equal(t, ans.From, ans.To)
}
