package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

func TestNothingUnvalidatedGoesUpstream(t *testing.T) {
	rec := &recorder{}
	core, logs := observer.New(zapcore.InfoLevel)
	env := servertest.Start(t, servertest.Options{
		Upstream: rec.wrap,
		Config: func(c *config.Config) {
			c.Log.Audit = true
			c.Networks["testnet"].PassThrough = []string{"/api/v1/listed"}
		},
		Logger: zap.New(core),
	})
	demo, research := servertest.Demo(), servertest.Research()
	permitted := upstreamsim.RestrictedStreams()[0]
	other := env.FeedID(t, upstreamsim.Testnet, "BTC", "USD", "V3")
	require.NotContains(t, upstreamsim.RestrictedStreams(), other)
	hidden := env.Sim.Hidden(upstreamsim.Testnet)[0]
	// Load the catalogs first, so that what follows counts only what the
	// requests themselves would send upstream.
	resp, _ := research.Get(t, env.Testnet, "/api/v1/feeds?hidden=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = demo.Get(t, env.Testnet, "/api/v1/feeds?hidden=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rec.mu.Lock()
	rec.targets = nil
	rec.mu.Unlock()

	tests := []struct {
		name   string
		c      *servertest.Client
		method string
		target string
		extra  string
		status int
	}{
		{"ws with a stream the team may not read", research, "GET", "/api/v1/ws?feedIDs=" + permitted + "," + other, "", 401},
		{"ws with a hidden stream", research, "GET", "/api/v1/ws?feedIDs=" + permitted + "%2C" + hidden, "", 401},
		{"ws with an unknown stream", demo, "GET", "/api/v1/ws?feedIDs=0x" + strings.Repeat("ab", 32), "", 401},
		{"ws with a malformed stream", demo, "GET", "/api/v1/ws?feedIDs=0x01", "", 400},
		{"ws without streams", demo, "GET", "/api/v1/ws", "", 400},
		{"dot-dot segments", demo, "GET", "/api/v1/../../admin/secrets", "", 400},
		{"encoded dots", demo, "GET", "/api/v1/%2e%2e/%2E%2E/admin", "", 400},
		{"encoded slash", demo, "GET", "/api/v1/reports%2Flatest?feedID=" + other, "", 400},
		{"dot segment", demo, "GET", "/api/v1/./feeds", "", 400},
		{"empty segment", demo, "GET", "/api/v1//feeds", "", 400},
		{"backslash", demo, "GET", "/api/v1/reports\\latest", "", 400},
		{"unknown path", demo, "GET", "/api/v1/admin", "", 404},
		{"unknown path unsigned", nil, "GET", "/api/v1/admin", "", 404},
		{"GET with a body", demo, "GET", "/api/v1/feeds", "Content-Length: 5\r\n\r\nhello", 400},
		{"GET with a chunked body", demo, "GET", "/api/v1/feeds", "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n", 400},
		{"HEAD of a gateway endpoint", demo, "HEAD", "/api/v1/feeds", "", 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawGet(t, env.Testnet, tc.c, tc.method, tc.target, tc.extra)
			assert.Equal(t, tc.status, resp.StatusCode, string(body))
			if tc.method != "HEAD" {
				var eb errorBody
				require.NoError(t, json.Unmarshal(body, &eb), "errors are JSON: %s", body)
				assert.NotEmpty(t, eb.Message)
			}
			assert.Empty(t, rec.matching("/"), "nothing reached the upstream")
		})
	}
	assert.Empty(t, logs.FilterLoggerName("audit").FilterField(zap.String("endpoint", "ws")).AllUntimed(), "no audit line for a refused connection")

	// Entitled streams pass the checks and are audited; the gateway
	// terminates WebSockets itself, so a plain GET gets its 426 from the
	// gateway and nothing is forwarded.
	resp, body := research.Get(t, env.Testnet, "/api/v1/ws?feedIDs="+permitted)
	assert.Equal(t, http.StatusUpgradeRequired, resp.StatusCode, string(body))
	assert.Empty(t, rec.matching("/api/v1/ws"))
	audit := logs.FilterLoggerName("audit").FilterField(zap.String("endpoint", "ws")).AllUntimed()
	require.Len(t, audit, 1)
	assert.Equal(t, "research", audit[0].ContextMap()["team"])
	assert.Equal(t, []any{permitted}, audit[0].ContextMap()["feeds"])

	// A path the operator listed is forwarded, GET and HEAD.
	resp, _ = demo.Get(t, env.Testnet, "/api/v1/listed")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the simulator knows no such path")
	assert.Len(t, rec.matching("/api/v1/listed"), 1, "a listed path reaches the upstream")
	resp, _ = demo.Get(t, env.Mainnet, "/api/v1/listed")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Len(t, rec.matching("/api/v1/listed"), 1, "listed on testnet only")
}

func TestDeclaredBodyNeverSent(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	u, err := url.Parse(env.Mainnet)
	require.NoError(t, err)
	for _, req := range []string{
		"GET /api/v1/feeds HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
		"POST /api/v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
		"GET /api/v1/nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", u.Host)
		require.NoError(t, err)
		// The deadline only keeps a broken test from hanging: the gateway
		// must answer and close long before.
		require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
		_, err = io.WriteString(conn, req)
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "an answer without the body")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Contains(t, []int{400, 404, 405}, resp.StatusCode)
		_, err = br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the connection is closed, not held for the body")
		conn.Close()
	}
}

func TestSkewOnlyFromVerifiedSignatures(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	count := func() uint64 {
		mfs, err := env.Registry.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "streamgate_client_clock_skew_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return 0
	}
	old := func() time.Time { return time.Now().Add(-time.Hour) }
	for _, c := range []*servertest.Client{
		{Key: config.DemoKeyID, Secret: "wrong-secret-0123456789", HTTP: http.DefaultClient, Now: old},
		{Key: "no-such-key", Secret: "wrong-secret-0123456789", HTTP: http.DefaultClient, Now: old},
	} {
		resp, _ := c.Get(t, env.Mainnet, "/api/v1/feeds")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	assert.Zero(t, count(), "unverified timestamps are not samples")
	stale := servertest.Demo()
	stale.Now = old
	resp, _ := stale.Get(t, env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, uint64(1), count(), "a verified signature with a stale timestamp is a sample")
}

func TestAnonymousCatalogBounded(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		c.Auth.AnonymousRate = config.Rate{RPS: 0.001, Burst: 5}
	}})
	anon := &servertest.Client{HTTP: http.DefaultClient}
	statuses := map[int]int{}
	var limited *http.Response
	for range 8 {
		resp, _ := anon.Get(t, env.Mainnet, "/api/v1/discovery?asset_class=Crypto")
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			limited = resp
		}
	}
	assert.Equal(t, map[int]int{200: 5, 429: 3}, statuses)
	require.NotNil(t, limited)
	assert.NotEmpty(t, limited.Header.Get("Retry-After"))
	// A signed request is the team's business, not the address's.
	resp, _ := servertest.Demo().Get(t, env.Mainnet, "/api/v1/discovery?asset_class=Crypto")
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	long := "/api/v1/discovery?base_asset=" + strings.Repeat("ETH,", 2000)
	resp, body := servertest.Demo().Get(t, env.Mainnet, long)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "4096 bytes")
	many := "/api/v1/discovery?base_asset=" + strings.Repeat("A,B,", 40)
	resp, body = servertest.Demo().Get(t, env.Mainnet, many)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "at most 64 list items")
}

func TestReplayRecordAcrossAuthReload(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) { c.Auth.ReplayGrace = 0 }})
	req, err := servertest.Demo().Request(t.Context(), env.Mainnet, "/api/v1/feeds")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, do(t, req))
	require.Equal(t, http.StatusUnauthorized, do(t, req), "a replay")

	next := *env.Config
	next.Auth.ReplayGrace = 2 * time.Second // and the other way round: a longer skew
	next.Auth.MaxSkew = 10 * time.Second
	require.NoError(t, env.Gateway.Reload(&next))
	time.Sleep(10 * time.Millisecond) // within the new grace of its first use: still accepted
	assert.Equal(t, http.StatusOK, do(t, req), "the first use is kept, so the new grace counts from it")

	next2 := next
	next2.Auth.ReplayGrace = 0
	require.NoError(t, env.Gateway.Reload(&next2))
	assert.Equal(t, http.StatusUnauthorized, do(t, req), "a replay across reloads that changed auth.* is still a replay")
}

func TestReplayRecordsOnlyAdmitted(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		c.Team(config.ResearchTeam).Rate = config.Rate{RPS: 0.001, Burst: 3}
		c.Team(config.ResearchTeam).DailyQuota = 0
		c.Auth.ReplayMaxEntries = 1000
	}})
	entries := func() float64 {
		return metricValue(t, env.Registry, "streamgate_replay_record_entries", map[string]string{})
	}
	research := servertest.Research()
	statuses := map[int]int{}
	for i := range 300 {
		// A distinct target per request: a distinct signature.
		resp, _ := research.Get(t, env.Testnet, "/api/v1/feeds?n="+strconv.Itoa(i))
		statuses[resp.StatusCode]++
	}
	assert.Equal(t, map[int]int{200: 3, 429: 297}, statuses)
	assert.Equal(t, 3.0, entries(), "only the admitted requests are recorded")

	// The demo team, unlimited, has the record but the research team's
	// share: what its rate can fill (auth.ReplayNeed: 0.001/s over 20 s,
	// rounded up, plus its burst of 3, plus one), 5 entries.
	demo := servertest.Demo()
	statuses = map[int]int{}
	var full *http.Response
	for i := range 1000 {
		resp, _ := demo.Get(t, env.Testnet, "/api/v1/feeds?n="+strconv.Itoa(i))
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusServiceUnavailable {
			full = resp
		}
	}
	assert.Equal(t, map[int]int{200: 995, 503: 5}, statuses, "the demo team's share of 995 entries, then refused")
	require.NotNil(t, full)
	assert.NotEmpty(t, full.Header.Get("Retry-After"))
	assert.Equal(t, 998.0, entries(), "995 and the research team's 3")
	assert.Equal(t, 5.0, metricValue(t, env.Registry, "streamgate_replay_record_full_total", map[string]string{}))
}
