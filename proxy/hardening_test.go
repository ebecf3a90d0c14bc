package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/config"
	"streamgate/proxy"
	"streamgate/proxy/proxytest"
	"streamgate/simulator"
)

// rawGet sends one request exactly as written (target not cleaned, headers
// as given) on a new connection, signed by c for that target, and returns
// the answer.
func rawGet(t *testing.T, base string, c *proxytest.Client, method, target string, extra string) (*http.Response, []byte) {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	req := method + " " + target + " HTTP/1.1\r\nHost: " + u.Host + "\r\n"
	if c != nil {
		hr, err := http.NewRequest(method, base+"/", nil)
		require.NoError(t, err)
		hr.URL.Opaque = target // sign the target as written
		hr.RequestURI = ""
		sign(hr, c, target)
		for _, h := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature} {
			req += h + ": " + hr.Header.Get(h) + "\r\n"
		}
	}
	req += extra + "\r\n"
	_, err = io.WriteString(conn, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// sign signs req for the raw target, as a client that sends it would.
func sign(req *http.Request, c *proxytest.Client, target string) {
	// auth.Sign signs req.URL.RequestURI(); an opaque URL keeps the target
	// exactly as given.
	req.URL = &url.URL{Scheme: "http", Host: req.URL.Host, Opaque: target}
	if strings.Contains(target, "?") {
		path, q, _ := strings.Cut(target, "?")
		req.URL.Opaque, req.URL.RawQuery = path, q
	}
	auth.Sign(req, c.Key, []byte(c.Secret), time.Now())
}

// TestNothingUnvalidatedGoesUpstream: unknown paths, dot segments, encoded
// slashes and dots, bodies and unentitled WebSocket streams are refused at
// the gateway; nothing of them reaches the upstream.
func TestNothingUnvalidatedGoesUpstream(t *testing.T) {
	rec := &recorder{}
	core, logs := observer.New(zapcore.InfoLevel)
	env := proxytest.Start(t, proxytest.Options{
		Upstream: rec.wrap,
		Config: func(c *config.Config) {
			c.Log.Audit = true
			c.Networks["testnet"].PassThrough = []string{"/api/v1/listed"}
		},
		Logger: zap.New(core),
	})
	demo, research := proxytest.Demo(), proxytest.Research()
	permitted := simulator.RestrictedStreams()[0]
	other := env.FeedID(t, simulator.Testnet, "BTC", "USD", "V3")
	require.NotContains(t, simulator.RestrictedStreams(), other)
	hidden := env.Sim.Hidden(simulator.Testnet)[0]
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
		c      *proxytest.Client
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

	// Entitled streams pass: the upgrade request is forwarded, audited.
	resp, body := research.Get(t, env.Testnet, "/api/v1/ws?feedIDs="+permitted)
	assert.NotContains(t, []int{400, 401, 404}, resp.StatusCode, string(body))
	assert.Len(t, rec.matching("/api/v1/ws"), 1)
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

// TestDeclaredBodyNeverSent: a request that declares a body and never sends
// it is answered at once and its connection closed, rather than held.
func TestDeclaredBodyNeverSent(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{})
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

// TestSkewOnlyFromVerifiedSignatures: requests with a wrong signature or an
// unknown key add nothing to the clock-skew histogram.
func TestSkewOnlyFromVerifiedSignatures(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{})
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
	for _, c := range []*proxytest.Client{
		{Key: config.DemoKeyID, Secret: "wrong-secret-0123456789", HTTP: http.DefaultClient, Now: old},
		{Key: "no-such-key", Secret: "wrong-secret-0123456789", HTTP: http.DefaultClient, Now: old},
	} {
		resp, _ := c.Get(t, env.Mainnet, "/api/v1/feeds")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	assert.Zero(t, count(), "unverified timestamps are not samples")
	stale := proxytest.Demo()
	stale.Now = old
	resp, _ := stale.Get(t, env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, uint64(1), count(), "a verified signature with a stale timestamp is a sample")
}

// TestTeamCatalogIsPrivate: only the anonymous listing may be kept by a
// shared cache in front of the gateway.
func TestTeamCatalogIsPrivate(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{})
	demo := proxytest.Demo()
	for _, target := range []string{"/api/v1/discovery", "/api/v1/discovery?hidden=true", "/api/v1/feeds", "/api/v1/feeds?hidden=true"} {
		resp, body := demo.Get(t, env.Mainnet, target)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Regexp(t, `^private, max-age=\d+$`, resp.Header.Get("Cache-Control"), target)
		assert.Contains(t, resp.Header.Values("Vary"), "Authorization", target)
	}
	anon := &proxytest.Client{HTTP: http.DefaultClient}
	resp, _ := anon.Get(t, env.Mainnet, "/api/v1/discovery")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Regexp(t, `^public, max-age=\d+$`, resp.Header.Get("Cache-Control"))
	assert.Contains(t, resp.Header.Values("Vary"), "Authorization", "a signed request to the same URL gets another answer")
}

// TestUnknownHostObserved: the 404 of an unknown Host on a shared listener
// is logged and counted like any other answer, with a request ID.
func TestUnknownHostObserved(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	env := proxytest.Start(t, proxytest.Options{
		Config: func(c *config.Config) {
			shared := freeAddr(t)
			c.Networks["mainnet"].Listen = shared
			c.Networks["mainnet"].Hosts = []string{"mainnet.streams.internal"}
			c.Networks["testnet"].Listen = shared
			c.Networks["testnet"].Hosts = []string{"testnet.streams.internal"}
		},
		Logger: zap.New(core),
	})
	l := env.Gateway.Listeners()
	require.Len(t, l, 1)
	srv := newServer(t, l[0].Handler)
	req, _ := http.NewRequest(http.MethodGet, srv+"/api/v1/feeds", nil)
	req.Host = "elsewhere.internal"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("X-Request-Id"))
	lines := logs.FilterMessage("request").AllUntimed()
	require.Len(t, lines, 1)
	assert.Equal(t, "unknown-host", lines[0].ContextMap()["network"])
	assert.EqualValues(t, 404, lines[0].ContextMap()["status"])
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_requests_total",
		map[string]string{"network": "unknown-host", "endpoint": "feeds", "code": "404", "team": "anonymous"}))
}

func newServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAnonymousCatalogBounded: unsigned discovery is limited per client
// address, and a query too long or with too many values is refused with a
// message that names the limit.
func TestAnonymousCatalogBounded(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{Config: func(c *config.Config) {
		c.Auth.AnonymousRate = config.Rate{RPS: 0.001, Burst: 5}
	}})
	anon := &proxytest.Client{HTTP: http.DefaultClient}
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
	resp, _ := proxytest.Demo().Get(t, env.Mainnet, "/api/v1/discovery?asset_class=Crypto")
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	long := "/api/v1/discovery?base_asset=" + strings.Repeat("ETH,", 2000)
	resp, body := proxytest.Demo().Get(t, env.Mainnet, long)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "4096 bytes")
	many := "/api/v1/discovery?base_asset=" + strings.Repeat("A,B,", 40)
	resp, body = proxytest.Demo().Get(t, env.Mainnet, many)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "at most 64 list items")
}

// TestPassThroughTimeout: a forwarded request gets the upstream timeout
// like every other upstream call.
func TestPassThroughTimeout(t *testing.T) {
	gaveUp := make(chan struct{}, 1)
	env := proxytest.Start(t, proxytest.Options{
		Config: func(c *config.Config) { c.Networks["mainnet"].Upstream.Timeout = 200 * time.Millisecond },
		Upstream: func(_ string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead && r.URL.Path == "/" {
					select {
					case <-r.Context().Done():
						gaveUp <- struct{}{}
					case <-time.After(30 * time.Second):
					}
					return
				}
				h.ServeHTTP(w, r)
			})
		},
	})
	req, err := http.NewRequest(http.MethodHead, env.Mainnet+"/", nil)
	require.NoError(t, err)
	auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	select {
	case <-gaveUp:
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway never gave up on the hanging upstream")
	}
}

// refusing answers 401 to every call signed with the organisation's key, as
// an upstream does when that credential is revoked.
func refusing(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get(auth.HeaderAuthorization), simulator.OrgKeyID) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"unauthorized"}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// TestUpstreamRefusesOurCredential: a 401 to the gateway's own credential is
// the operator's problem, not the client's: 502 with a message saying so,
// counted.
func TestUpstreamRefusesOurCredential(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{Upstream: refusing, Quiet: true, Cold: true})
	demo := proxytest.Demo()
	btc := env.FeedID(t, simulator.Mainnet, "BTC", "USD", "V3")
	for _, target := range []string{"/api/v1/feeds", "/api/v1/discovery?hidden=true", "/api/v1/reports/latest?feedID=" + btc} {
		resp, body := demo.Get(t, env.Mainnet, target)
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode, target)
		assert.Contains(t, string(body), "refused the gateway's credential", target)
	}
	req, err := http.NewRequest(http.MethodHead, env.Mainnet+"/", nil)
	require.NoError(t, err)
	auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "pass-through too")
	assert.GreaterOrEqual(t, metricValue(t, env.Registry, "streamgate_upstream_credential_refused_total", map[string]string{"network": "mainnet"}), 4.0)
}

// TestUpstream401ForAStreamPassesOn: while the catalog cannot be had (5xx)
// and the credential was never refused, an upstream 401 for a stream is the
// upstream's word on that stream and reaches the client as 401.
func TestUpstream401ForAStreamPassesOn(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{Quiet: true, Cold: true, Upstream: func(_ string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/discovery" {
				http.Error(w, `{"error":"down"}`, http.StatusInternalServerError)
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	resp, body := proxytest.Demo().Get(t, env.Mainnet, "/api/v1/reports/latest?feedID=0x"+strings.Repeat("ab", 32))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
	assert.Zero(t, metricValue(t, env.Registry, "streamgate_upstream_credential_refused_total", map[string]string{"network": "mainnet"}))
}

// TestUpstream500RetriedAndRetryAfter: a 500 is retried like a 502; a 5xx
// that is passed on carries Retry-After.
func TestUpstream500RetriedAndRetryAfter(t *testing.T) {
	var fail, calls atomic.Int32 // answers left to fail with 500; report calls
	env := proxytest.Start(t, proxytest.Options{Quiet: true, Upstream: func(_ string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/reports" {
				calls.Add(1)
			}
			if r.URL.Path == "/api/v1/reports" && fail.Add(-1) >= 0 {
				http.Error(w, `{"error":"internal"}`, http.StatusInternalServerError)
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	demo := proxytest.Demo()
	btc := env.FeedID(t, simulator.Mainnet, "BTC", "USD", "V3")
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/feeds?hidden=true") // the catalog first
	require.Equal(t, http.StatusOK, resp.StatusCode)
	fail.Store(1)
	resp, body := demo.Get(t, env.Mainnet, reportTarget(btc, pastTS(), 0))
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, int32(2), calls.Load(), "one 500, then the retry")

	fail.Store(100)
	resp, body = demo.Get(t, env.Mainnet, reportTarget(btc, pastTS(), 1))
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, string(body))
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
}

// TestBudgetWithoutDeps: a gateway given no budgets still keeps the
// configured one.
func TestBudgetWithoutDeps(t *testing.T) {
	sim, err := simulator.New(simulator.Default())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	up := httptest.NewServer(sim.Handler(simulator.Mainnet))
	t.Cleanup(up.Close)
	store, err := cache.New(cache.Config{MaxBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(store.Close)
	cfg := config.Default()
	delete(cfg.Networks, "testnet")
	for i := range cfg.Teams {
		cfg.Teams[i].Networks = []string{"mainnet"}
	}
	n := cfg.Networks["mainnet"]
	n.Upstream = config.Upstream{URL: up.URL, Credentials: config.Credentials{APIKey: simulator.OrgKeyID, APISecret: simulator.OrgKeySecret},
		Timeout: time.Second, Budget: config.Rate{RPS: 0.001, Burst: 2}, MaxBulk: 100}
	gw, err := proxy.New(cfg, proxy.Deps{Cache: store})
	require.NoError(t, err)
	base := newServer(t, gw.Handler("mainnet"))
	demo := proxytest.Demo()
	var btc string
	for _, s := range sim.Streams(simulator.Mainnet) {
		if s.BaseAsset == "BTC" && s.QuoteAsset == "USD" && s.SchemaVersion == "V3" {
			btc = s.FeedID
		}
	}
	statuses := map[int]int{}
	for i := range 4 {
		resp, _ := demo.Get(t, base, reportTarget(btc, pastTS(), i))
		statuses[resp.StatusCode]++
	}
	assert.Equal(t, map[int]int{200: 2, 503: 2}, statuses, "two report calls fit the burst, the catalog has its own endpoint budget")
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestParsedCatalogCounted: the parsed form of a catalog view is held by its
// cache entry and counted in cache.max_bytes, not in a memo beside it.
func TestParsedCatalogCounted(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{})
	resp, body := proxytest.Demo().Get(t, env.Mainnet, "/api/v1/discovery?hidden=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	env.Cache.Wait()
	assert.Greater(t, env.Cache.Bytes(), int64(3*len(body)), "body, raw streams and decoded streams")
}

// TestWarmUpRetries: an upstream unreachable at start is tried again in the
// background, and readiness follows once it answers.
func TestWarmUpRetries(t *testing.T) {
	var down atomic.Bool
	var refused atomic.Int32
	down.Store(true)
	env := proxytest.Start(t, proxytest.Options{Quiet: true, Cold: true, Upstream: func(_ string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if down.Load() {
				refused.Add(1)
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close() // no answer at all, as from a host that is down
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	done := make(chan error, 1)
	go func() { done <- env.Gateway.Warm(t.Context()) }()
	require.Eventually(t, func() bool { return refused.Load() >= 6 }, 30*time.Second, 10*time.Millisecond,
		"warm-up keeps trying (two networks, three attempts per call)")
	assert.False(t, env.Gateway.Ready(), "not ready while no upstream answered")
	down.Store(false)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("warm-up did not finish after the upstream came back")
	}
	assert.True(t, env.Gateway.Ready(), "ready once the upstreams answered")
}

// TestServerReadTimeout: every listener is built with the configured read
// timeout, so even a handler that reads a body never waits longer for it.
func TestServerReadTimeout(t *testing.T) {
	readErr := make(chan error, 1)
	s := config.Default().Server
	s.ReadTimeout = 300 * time.Millisecond
	srv := proxy.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}), s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
	require.NoError(t, err)
	select {
	case err := <-readErr:
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout(), "the body read ends with the read timeout: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the server waited for the body past its read timeout")
	}
	assert.Equal(t, config.Default().Server.WriteTimeout, srv.WriteTimeout)
}

// do sends req (a clone, so that it can be sent again) and returns the
// status.
func do(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req.Clone(req.Context()))
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReplayRecordAcrossAuthReload: a reload that changes the auth settings
// keeps the signatures seen.
func TestReplayRecordAcrossAuthReload(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{Config: func(c *config.Config) { c.Auth.ReplayGrace = 0 }})
	req, err := proxytest.Demo().Request(t.Context(), env.Mainnet, "/api/v1/feeds")
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

// TestReplayRecordsOnlyAdmitted: requests refused by a quota leave nothing
// in the replay record; the record is bounded and a full record refuses
// with 503 rather than accept an unrecorded signature.
func TestReplayRecordsOnlyAdmitted(t *testing.T) {
	env := proxytest.Start(t, proxytest.Options{Quiet: true, Config: func(c *config.Config) {
		c.Team(config.ResearchTeam).Rate = config.Rate{RPS: 0.001, Burst: 3}
		c.Team(config.ResearchTeam).DailyQuota = 0
		c.Auth.ReplayMaxEntries = 1000
	}})
	entries := func() float64 {
		return metricValue(t, env.Registry, "streamgate_replay_record_entries", map[string]string{})
	}
	research := proxytest.Research()
	statuses := map[int]int{}
	for i := range 300 {
		// A distinct target per request: a distinct signature.
		resp, _ := research.Get(t, env.Testnet, "/api/v1/feeds?n="+strconv.Itoa(i))
		statuses[resp.StatusCode]++
	}
	assert.Equal(t, map[int]int{200: 3, 429: 297}, statuses)
	assert.Equal(t, 3.0, entries(), "only the admitted requests are recorded")

	demo := proxytest.Demo() // unlimited
	statuses = map[int]int{}
	var full *http.Response
	for i := range 1000 {
		resp, _ := demo.Get(t, env.Testnet, "/api/v1/feeds?n="+strconv.Itoa(i))
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusServiceUnavailable {
			full = resp
		}
	}
	assert.Equal(t, map[int]int{200: 997, 503: 3}, statuses, "1000 entries in all, then refused")
	require.NotNil(t, full)
	assert.NotEmpty(t, full.Header.Get("Retry-After"))
	assert.Equal(t, 1000.0, entries())
	assert.Equal(t, 3.0, metricValue(t, env.Registry, "streamgate_replay_record_full_total", map[string]string{}))
}
