package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

func refusing(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get(auth.HeaderAuthorization), upstreamsim.OrgKeyID) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"unauthorized"}`)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func TestUpstreamRefusesOurCredential(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Upstream: refusing, Quiet: true, Cold: true, Config: func(c *config.Config) {
		c.Networks["mainnet"].PassThrough = []string{"/api/v1/listed"}
	}})
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	for _, target := range []string{"/api/v1/feeds", "/api/v1/discovery?hidden=true", "/api/v1/reports/latest?feedID=" + btc} {
		resp, body := demo.Get(t, env.Mainnet, target)
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode, target)
		assert.Contains(t, string(body), "the upstream refused the upstream credential of network mainnet", target)
		assert.NotContains(t, string(body), "team", target)
	}
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/listed")
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "pass-through too")
	assert.GreaterOrEqual(t, metricValue(t, env.Registry, "streamgate_upstream_credential_refused_total",
		map[string]string{"network": "mainnet", "credential": proxy.CredentialNetwork, "team": ""}), 4.0)
}

// TestUpstreamRefusesATeamsOwnCredential: the network's credential works
// and a team's own upstream credential is refused. The 502, the log line
// and the metric name the team's credential, never the network's, and
// never a secret.
func TestUpstreamRefusesATeamsOwnCredential(t *testing.T) {
	const ownKey, ownSecret = "0badc0de-1111-4222-8333-444455556666", "own-upstream-secret-0123456789"
	core, logs := observer.New(zapcore.InfoLevel)
	env := servertest.Start(t, servertest.Options{Logger: zap.New(core), Cold: true, Config: func(c *config.Config) {
		c.Teams = append(c.Teams, config.Team{
			Name: "trading", Networks: []string{"mainnet"}, Feeds: config.StreamIDs{config.AllFeedsWildcard},
			// A key the simulator does not know: it answers 401.
			Upstream: map[string]*config.Credentials{"mainnet": {APIKey: ownKey, APISecret: ownSecret}},
			Keys:     []config.Key{{ID: "trading-key", Secret: "trading-secret-0123456789"}},
		})
	}})
	trading := &servertest.Client{Key: "trading-key", Secret: "trading-secret-0123456789", HTTP: http.DefaultClient}
	resp, body := trading.Get(t, env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "your team's own upstream credential (team trading, network mainnet)")
	assert.NotContains(t, string(body), "upstream credential of network")
	assert.NotContains(t, string(body), ownSecret)

	resp, body = servertest.Demo().Get(t, env.Mainnet, "/api/v1/feeds")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the network's credential still works: %s", body)

	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_upstream_credential_refused_total",
		map[string]string{"network": "mainnet", "credential": proxy.CredentialTeam, "team": "trading"}))
	assert.Zero(t, metricValue(t, env.Registry, "streamgate_upstream_credential_refused_total",
		map[string]string{"network": "mainnet", "credential": proxy.CredentialNetwork, "team": ""}))

	lines := logs.FilterMessageSnippet("the upstream refused a credential").AllUntimed()
	require.Len(t, lines, 1)
	f := lines[0].ContextMap()
	assert.Equal(t, proxy.CredentialTeam, f["credential"])
	assert.Equal(t, "trading", f["team_credential"])
	assert.Contains(t, lines[0].Message, "team trading")
	for _, l := range logs.AllUntimed() {
		assert.NotContains(t, fmt.Sprint(l.Message, l.ContextMap()), ownSecret, "no secret in a log line")
	}
}

func TestUpstream401ForAStreamPassesOn(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Cold: true, Upstream: func(_ string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/discovery" {
				http.Error(w, `{"error":"down"}`, http.StatusInternalServerError)
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	resp, body := servertest.Demo().Get(t, env.Mainnet, "/api/v1/reports/latest?feedID=0x"+strings.Repeat("ab", 32))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
	assert.Zero(t, metricValue(t, env.Registry, "streamgate_upstream_credential_refused_total", map[string]string{"network": "mainnet"}))
}

func TestUpstream500RetriedAndRetryAfter(t *testing.T) {
	var fail, calls atomic.Int32 // answers left to fail with 500; report calls
	env := servertest.Start(t, servertest.Options{Quiet: true, Upstream: func(_ string, h http.Handler) http.Handler {
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
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/feeds?hidden=true") // the catalog first
	require.Equal(t, http.StatusOK, resp.StatusCode)
	fail.Store(1)
	ts := pastTS() // once: a second passing between the requests would ask one report twice
	resp, body := demo.Get(t, env.Mainnet, reportTarget(btc, ts, 0))
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, int32(2), calls.Load(), "one 500, then the retry")

	fail.Store(100)
	resp, body = demo.Get(t, env.Mainnet, reportTarget(btc, ts, 1))
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode, string(body))
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
}

func TestBudgetWithoutDeps(t *testing.T) {
	sim, err := upstreamsim.New(upstreamsim.Default())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	up := httptest.NewServer(sim.Handler(upstreamsim.Mainnet))
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
	n.Upstream = config.Upstream{URL: up.URL, Credentials: config.Credentials{APIKey: upstreamsim.OrgKeyID, APISecret: upstreamsim.OrgKeySecret},
		Timeout: time.Second, Budget: config.Rate{RPS: 0.001, Burst: 3}, MaxBulk: 100}
	gw, err := proxy.New(cfg, proxy.Deps{Cache: store})
	require.NoError(t, err)
	base := newServer(t, gw.Handler("mainnet"))
	demo := servertest.Demo()
	var btc string
	for _, s := range sim.Streams(upstreamsim.Mainnet) {
		if s.BaseAsset == "BTC" && s.QuoteAsset == "USD" && s.SchemaVersion == "V3" {
			btc = s.FeedID
		}
	}
	statuses := map[int]int{}
	ts := pastTS() // once: a second passing between two requests would ask one report twice
	for i := range 4 {
		resp, _ := demo.Get(t, base, reportTarget(btc, ts, i))
		statuses[resp.StatusCode]++
	}
	assert.Equal(t, map[int]int{200: 1, 503: 3}, statuses, "one report call: the budget spaces calls 1/rps apart whatever the burst; the catalog has its own endpoint budget")
}

func TestWarmUpRetries(t *testing.T) {
	var down atomic.Bool
	var refused atomic.Int32
	down.Store(true)
	env := servertest.Start(t, servertest.Options{Quiet: true, Cold: true, Upstream: func(_ string, h http.Handler) http.Handler {
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
