package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// quotaClock is a fake clock for the gateway and the signing client: time
// moves only when the test says so, so token buckets do not refill.
type quotaClock struct{ ns atomic.Int64 }

func newQuotaClock(t time.Time) *quotaClock {
	c := &quotaClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *quotaClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *quotaClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// metricValue returns the value of the counter or gauge name with exactly
// labels in reg, 0 if absent.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return servertest.MetricValue(t, reg, name, labels)
}

// metricSum returns the sum of the counter name over every label set.
func metricSum(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// noReplayCheck turns replay protection off: at a clock that stands still,
// the same request signed twice carries the same signature.
func noReplayCheck(c *config.Config) { c.Auth.ReplayProtection = false }

// requireAPIError checks the JSON error body of a refusal.
func requireAPIError(t testing.TB, body []byte) errorBody {
	t.Helper()
	var eb errorBody
	require.NoError(t, json.Unmarshal(body, &eb), string(body))
	require.NotEmpty(t, eb.Error, string(body))
	assert.Equal(t, eb.Error, eb.Message)
	return eb
}

// retryAfter returns the Retry-After of resp in seconds, failing t when it
// is missing or not a number.
func retryAfter(t testing.TB, resp *http.Response) int {
	t.Helper()
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	return s
}

func reportsCalls(env *servertest.Env) int64 {
	return env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointReport)
}

// reportTarget is the report of feed at the i-th distinct past timestamp.
func reportTarget(feed string, base int64, i int) string {
	return "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(base-int64(i), 10)
}

func rejections(t testing.TB, env *servertest.Env, team, limit string) float64 {
	t.Helper()
	return metricValue(t, env.Registry, "streamgate_ratelimit_rejections_total", map[string]string{"team": team, "limit": limit})
}

// TestQuotaTeamBurst: a team with burst N gets exactly N requests while the
// clock stands still; the next is 429 before any upstream call, and every
// answer advertises the policy.
func TestQuotaTeamBurst(t *testing.T) {
	const burst = 5
	clock := newQuotaClock(time.Now())
	env := servertest.Start(t, servertest.Options{Now: clock.Now, Config: func(c *config.Config) {
		noReplayCheck(c)
		c.Team(config.DemoTeam).Rate = config.Rate{RPS: 1, Burst: burst}
	}})
	c := servertest.Demo()
	c.Now = clock.Now
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	base := pastTS()

	for i := 1; i <= burst; i++ {
		resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, i))
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body)
		assert.Equal(t, []string{`"team";q=5;w=5`}, resp.Header.Values("RateLimit-Policy"), "request %d", i)
		assert.Equal(t, []string{`"team";r=` + strconv.Itoa(burst-i) + `;t=` + strconv.Itoa(i)}, resp.Header.Values("RateLimit"), "request %d", i)
		assert.Empty(t, resp.Header.Get("Retry-After"))
	}
	calls := env.UpstreamCalls()

	resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, burst+1))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	eb := requireAPIError(t, body)
	assert.Contains(t, eb.Error, "team")
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, 1, retryAfter(t, resp), "one token a second")
	assert.Equal(t, []string{`"team";q=5;w=5`}, resp.Header.Values("RateLimit-Policy"))
	assert.Equal(t, []string{`"team";r=0;t=1`}, resp.Header.Values("RateLimit"))
	assert.Equal(t, calls, env.UpstreamCalls(), "a refused request never reaches the upstream")
	assert.Equal(t, 1.0, rejections(t, env, config.DemoTeam, "team"))

	// A second later one token is back, and only one.
	clock.Advance(time.Second)
	resp, body = c.Get(t, env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = c.Get(t, env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	assert.Equal(t, 2.0, rejections(t, env, config.DemoTeam, "team"))
}

// TestQuotaKeyRate: a key limited more tightly than its team is refused on
// its own, without using up the team's rate for the team's other keys.
func TestQuotaKeyRate(t *testing.T) {
	const otherKey, otherSecret = "demo-second-key", "demo-second-secret-0123456789"
	clock := newQuotaClock(time.Now())
	env := servertest.Start(t, servertest.Options{Now: clock.Now, Config: func(c *config.Config) {
		noReplayCheck(c)
		team := c.Team(config.DemoTeam)
		team.Rate = config.Rate{RPS: 1, Burst: 6}
		team.Keys[0].Rate = config.Rate{RPS: 1, Burst: 2}
		team.Keys = append(team.Keys, config.Key{ID: otherKey, Secret: otherSecret})
	}})
	limited := servertest.Demo()
	limited.Now = clock.Now
	other := &servertest.Client{Key: otherKey, Secret: otherSecret, HTTP: http.DefaultClient, Now: clock.Now}

	for i := range 2 {
		resp, body := limited.Get(t, env.Mainnet, "/api/v1/feeds")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Equal(t, []string{`"key";q=2;w=2`, `"team";q=6;w=6`}, resp.Header.Values("RateLimit-Policy"), "request %d", i)
	}
	for range 5 {
		resp, body := limited.Get(t, env.Mainnet, "/api/v1/feeds")
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
		assert.Contains(t, requireAPIError(t, body).Error, "key")
		assert.Equal(t, 1, retryAfter(t, resp))
		assert.Equal(t, []string{`"key";q=2;w=2`}, resp.Header.Values("RateLimit-Policy"))
		assert.Equal(t, []string{`"key";r=0;t=1`}, resp.Header.Values("RateLimit"))
	}
	assert.Equal(t, 5.0, rejections(t, env, config.DemoTeam, "key"))
	assert.Zero(t, rejections(t, env, config.DemoTeam, "team"))

	// The key's refusals cost the team nothing: its other key has the four
	// requests left of the team's six.
	for i := range 4 {
		resp, body := other.Get(t, env.Mainnet, "/api/v1/feeds")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body)
		assert.Equal(t, []string{`"team";q=6;w=6`}, resp.Header.Values("RateLimit-Policy"))
	}
	resp, body := other.Get(t, env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	assert.Contains(t, requireAPIError(t, body).Error, "team")
	assert.Equal(t, 1.0, rejections(t, env, config.DemoTeam, "team"))
}

// TestQuotaDaily: a daily quota refuses until the end of the UTC day, then
// admits again.
func TestQuotaDaily(t *testing.T) {
	const quota = 3
	// One hour before midnight UTC.
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(23 * time.Hour)
	clock := newQuotaClock(start)
	env := servertest.Start(t, servertest.Options{Now: clock.Now, Config: func(c *config.Config) {
		noReplayCheck(c)
		c.Team(config.DemoTeam).DailyQuota = quota
	}, Sim: func(s *upstreamsim.Config) {
		s.MaxSkew = 48 * time.Hour // the upstream calls are signed at the fake clock
	}})
	c := servertest.Demo()
	c.Now = clock.Now
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	base := pastTS()

	for i := 1; i <= quota; i++ {
		resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, i))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Equal(t, []string{`"daily";q=3;w=86400`}, resp.Header.Values("RateLimit-Policy"))
		assert.Equal(t, []string{`"daily";r=` + strconv.Itoa(quota-i) + `;t=3600`}, resp.Header.Values("RateLimit"))
	}
	calls := env.UpstreamCalls()
	clock.Advance(30 * time.Minute)
	for range 2 {
		resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, quota+1))
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
		assert.Contains(t, requireAPIError(t, body).Error, "daily quota")
		assert.Equal(t, 1800, retryAfter(t, resp), "until midnight UTC")
		assert.Equal(t, []string{`"daily";q=3;w=86400`}, resp.Header.Values("RateLimit-Policy"))
		assert.Equal(t, []string{`"daily";r=0;t=1800`}, resp.Header.Values("RateLimit"))
	}
	assert.Equal(t, calls, env.UpstreamCalls(), "a refused request never reaches the upstream")
	assert.Equal(t, 2.0, rejections(t, env, config.DemoTeam, "daily"))

	clock.Advance(30*time.Minute + time.Second) // a new UTC day
	resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, quota+1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, []string{`"daily";r=2;t=86399`}, resp.Header.Values("RateLimit"))
}

// budgetConfig gives mainnet an upstream budget of rps with burst 1 and a
// fill deadline of timeout×(retries+1)+1s = 1.3s.
func budgetConfig(rps float64) func(*config.Config) {
	return func(c *config.Config) {
		noReplayCheck(c)
		up := &c.Networks["mainnet"].Upstream
		up.Budget = config.Rate{RPS: rps, Burst: 1}
		up.Timeout = 300 * time.Millisecond
		up.Retries = 0
	}
}

func budgetRefusals(t testing.TB, env *servertest.Env, endpoint string) float64 {
	t.Helper()
	return metricValue(t, env.Registry, "streamgate_upstream_budget_refusals_total", map[string]string{"network": "mainnet", "endpoint": endpoint})
}

// TestBudgetCacheHitsAndExhaustion: cache hits spend no upstream budget; a
// miss that cannot get a token within the fill's deadline is 503 with
// Retry-After and no upstream call.
func TestBudgetCacheHitsAndExhaustion(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: budgetConfig(0.01)}) // a token per 100 s
	c := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	base := pastTS()

	for i := range 20 {
		resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, 0))
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: %s", i, body)
		if i > 0 {
			assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
		}
	}
	assert.Equal(t, int64(1), reportsCalls(env), "one upstream call, then hits")
	assert.Zero(t, budgetRefusals(t, env, "reports"))

	// The next miss would wait ~100 s for a token, far past the fill's
	// deadline: it is refused at once, well within the client's own.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := c.Request(ctx, env.Mainnet, reportTarget(btc, base, 1))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var eb errorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, eb.Error)
	assert.Contains(t, eb.Error, "budget")
	ra := retryAfter(t, resp)
	assert.GreaterOrEqual(t, ra, 90)
	assert.LessOrEqual(t, ra, 101, "100 s and the budget's margin, in whole seconds rounded up")
	assert.Equal(t, int64(1), reportsCalls(env), "no upstream call without budget")
	assert.Equal(t, 1.0, budgetRefusals(t, env, "reports"))

	// The refusal is not cached, and hits still need no budget.
	resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, 0))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = c.Get(t, env.Mainnet, reportTarget(btc, base, 1))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	assert.Equal(t, int64(1), reportsCalls(env))
}

// TestBudgetWaitOutlivesClient documents how a budget wait relates to the
// client: the fill that waits is detached from the client (it goes on for
// every waiter of the same key), so a client that gives up does not stop
// it; the wait is bounded by the fill's own deadline, and its answer is
// cached for the next caller.
func TestBudgetWaitOutlivesClient(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: budgetConfig(2)}) // next token within 0.5 s, well within the wait's 1 s
	c := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	base := pastTS()

	resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, 0))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, err := c.Request(ctx, env.Mainnet, reportTarget(btc, base, 1))
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the client gives up while the fill waits for budget")

	require.Eventually(t, func() bool { return reportsCalls(env) == 2 }, 5*time.Second, 20*time.Millisecond,
		"the detached fill got its token and called the upstream")
	require.Eventually(t, func() bool {
		resp, _ := c.Get(t, env.Mainnet, reportTarget(btc, base, 1))
		return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Cache") == "HIT"
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, int64(2), reportsCalls(env))
	assert.Zero(t, budgetRefusals(t, env, "reports"))
}

// TestBudgetWaitLeavesAttemptTime: a fill waits for budget only while its
// attempt would still have its whole timeout; a token due later is refused
// at once with 503 and Retry-After, rather than waited for and then spent
// on an attempt that has no time left to get an answer.
func TestBudgetWaitLeavesAttemptTime(t *testing.T) {
	// Fill deadline 0.3 s + 1 s; a token every 1.25 s: within the deadline,
	// but not with 0.3 s left after it.
	env := servertest.Start(t, servertest.Options{Config: budgetConfig(0.8)})
	c := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	base := pastTS()

	resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, 0))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Latency: 250 * time.Millisecond}))

	resp, body = c.Get(t, env.Mainnet, reportTarget(btc, base, 1))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	assert.Contains(t, requireAPIError(t, body).Error, "budget")
	ra := retryAfter(t, resp)
	assert.GreaterOrEqual(t, ra, 1)
	assert.LessOrEqual(t, ra, 2)
	assert.Equal(t, 1.0, budgetRefusals(t, env, "reports"))
	assert.Equal(t, int64(1), reportsCalls(env), "no token spent on an attempt without time")
}

// retryAfter60 makes every upstream 429 ask for a minute's pause, longer
// than any fill deadline.
func retryAfter60(_ string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&retryAfterWriter{ResponseWriter: w}, r)
	})
}

type retryAfterWriter struct{ http.ResponseWriter }

func (w *retryAfterWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "60")
	}
	w.ResponseWriter.WriteHeader(code)
}

// TestBudgetUpstream429Pause: an upstream 429 pauses that endpoint for its
// Retry-After: the next call within the pause does not reach the upstream;
// other endpoints go on.
func TestBudgetUpstream429Pause(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Upstream: retryAfter60, Config: func(c *config.Config) {
		noReplayCheck(c)
		up := &c.Networks["mainnet"].Upstream
		up.Timeout = 300 * time.Millisecond
		up.Retries = 0
	}})
	c := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	base := pastTS()
	resp, _ := c.Get(t, env.Mainnet, "/api/v1/feeds") // the catalog, before the faults
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Force429: 1}))
	resp, body := c.Get(t, env.Mainnet, reportTarget(btc, base, 0))
	// The gateway's own answer, never the upstream's 429.
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	requireAPIError(t, body)
	assert.Equal(t, 60, retryAfter(t, resp), "the upstream's Retry-After")
	require.Equal(t, int64(1), reportsCalls(env))
	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))

	for i := 1; i <= 3; i++ {
		resp, body = c.Get(t, env.Mainnet, reportTarget(btc, base, i))
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
		requireAPIError(t, body)
		ra := retryAfter(t, resp)
		assert.GreaterOrEqual(t, ra, 50)
		assert.LessOrEqual(t, ra, 60)
	}
	assert.Equal(t, int64(1), reportsCalls(env), "no call reaches the paused endpoint")
	assert.Equal(t, 3.0, budgetRefusals(t, env, "reports"))
	down := map[string]string{"network": "mainnet", "endpoint": "reports", "direction": "down"}
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_upstream_budget_adjustments_total", down), "the 429 slowed the endpoint's budget")
	rps := metricValue(t, env.Registry, "streamgate_upstream_budget_rps", map[string]string{"network": "mainnet", "endpoint": "reports"})
	eff := metricValue(t, env.Registry, "streamgate_upstream_budget_effective_rps", map[string]string{"network": "mainnet", "endpoint": "reports"})
	assert.Equal(t, rps/2, eff, "to half its rate")

	resp, body = c.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
	require.Equal(t, http.StatusOK, resp.StatusCode, "another endpoint is not paused: %s", body)
}
