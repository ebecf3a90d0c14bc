package proxy_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/ratelimit"
	"streamgate/server"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// The shared limits of the replica tests: the demo team's rate, and the
// upstream budget of every endpoint (whose calls are spaced 1/rate apart,
// whatever the burst, here without a margin).
const (
	replicaRate   = 1.0
	replicaBurst  = 60
	replicaBudget = 5.0
	// batchTeam has no rate of its own: its requests spend only the
	// upstream budget.
	batchTeam, batchKey, batchSecret = "batch", "batch-key", "batch-secret-0123456789"
	// dailyTeam has a daily quota and nothing else.
	dailyTeam, dailyKey, dailySecret = "daily", "daily-key", "daily-secret-0123456789"
	dailyQuota                       = 90
	// retryRedis is how long a replica decides without Redis after it
	// failed before trying it again.
	retryRedis = 100 * time.Millisecond
)

// replica is one gateway whose limits live in the shared Redis.
type replica struct {
	env *servertest.Env
	reg *prometheus.Registry // the ratelimit metrics
}

func (r *replica) fallbacks(t testing.TB, mode ratelimit.FailMode) float64 {
	t.Helper()
	return metricValue(t, r.reg, "streamgate_redis_fallbacks_total", map[string]string{"mode": mode.String()})
}

// startReplicas starts n gateways, each with its own simulator, whose team
// rates, daily quotas and upstream budgets are kept in srv, each through
// its own Redis client.
func startReplicas(t *testing.T, srv *redistest.Server, n int, mode ratelimit.FailMode) []*replica {
	t.Helper()
	out := make([]*replica, n)
	for i := range out {
		opt, err := redis.ParseURL(srv.URL())
		require.NoError(t, err)
		// Give up at once when Redis is gone, as a gateway is configured.
		opt.MaxRetries = -1
		opt.DialerRetries = 1
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 250*time.Millisecond, 250*time.Millisecond, 250*time.Millisecond
		client := redis.NewClient(opt)
		t.Cleanup(func() { _ = client.Close() })

		reg := prometheus.NewRegistry()
		m, err := ratelimit.NewMetrics(reg)
		require.NoError(t, err)
		opts := func(name, network string) ratelimit.Options {
			return ratelimit.Options{Name: name, Network: network, Metrics: m, FailMode: mode, RetryInterval: retryRedis}
		}
		// Limits of their own, for a fallback that probes Redis again
		// sooner than a gateway's.
		limits := &server.Limits{Budgets: map[string]ratelimit.Budget{}}
		limits.Limiter, err = ratelimit.NewRedis(client, opts("team", ""))
		require.NoError(t, err)
		limits.Quota, err = ratelimit.NewRedisQuota(client, opts("daily", ""))
		require.NoError(t, err)
		for _, name := range []string{"mainnet", "testnet"} {
			limits.Budgets[name], err = ratelimit.NewRedisBudget(client, opts("budget", name))
			require.NoError(t, err)
		}
		env := servertest.Start(t, servertest.Options{Quiet: true, Config: replicaConfig, Upstream: retryAfter60, Limits: limits})
		out[i] = &replica{env: env, reg: reg}
	}
	return out
}

func replicaConfig(c *config.Config) {
	// Many identical requests are signed within the same millisecond.
	noReplayCheck(c)
	c.Team(config.DemoTeam).Rate = config.Rate{RPS: replicaRate, Burst: replicaBurst}
	c.Teams = append(c.Teams, config.Team{
		Name: batchTeam, Networks: []string{"mainnet"}, Feeds: config.StreamIDs{config.AllFeedsWildcard},
		Keys: []config.Key{{ID: batchKey, Secret: batchSecret}},
	}, config.Team{
		Name: dailyTeam, Networks: []string{"mainnet"}, Feeds: config.StreamIDs{config.AllFeedsWildcard},
		DailyQuota: dailyQuota,
		Keys:       []config.Key{{ID: dailyKey, Secret: dailySecret}},
	})
	for _, n := range c.Networks {
		n.Upstream.Budget = config.Rate{RPS: replicaBudget, Burst: replicaBurst}
		n.Upstream.BudgetMargin = 0
		// A fill waits for budget at most 0.3 s × 1 + 1 s.
		n.Upstream.Timeout = 300 * time.Millisecond
		n.Upstream.Retries = 0
	}
}

// replicaHTTP is an HTTP client that keeps enough connections for the
// drivers.
func replicaHTTP(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// status sends a signed GET and returns the answer's status, or 0 and the
// error.
func status(c *servertest.Client, base, target string) (int, error) {
	req, err := c.Request(context.Background(), base, target)
	if err != nil {
		return 0, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// drive runs workers goroutines per replica, each sending requests made by
// target until d has passed, and returns how many got each status and the
// time from the first request to the end of the last.
func drive(t *testing.T, reps []*replica, c *servertest.Client, workers int, d time.Duration, target func() string) (map[int]int, time.Duration) {
	t.Helper()
	const maxPerWorker = 2000 // a bound on the load, whatever the speed
	var (
		mu     sync.Mutex
		counts = map[int]int{}
		wg     sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(d)
	for _, r := range reps {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < maxPerWorker && time.Now().Before(stop); i++ {
					code, err := status(c, r.env.Mainnet, target())
					if err != nil {
						t.Errorf("request: %v", err)
						return
					}
					mu.Lock()
					counts[code]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	return counts, time.Since(start)
}

// requireWithin5Percent checks got against the expected total of a bucket
// of burst, refilled at rate during elapsed.
func requireWithin5Percent(t *testing.T, what string, got int, burst int, rate float64, elapsed time.Duration) {
	t.Helper()
	want := float64(burst) + rate*elapsed.Seconds()
	t.Logf("%s: %d, expected %.1f (burst %d + %.1f/s × %v)", what, got, want, burst, rate, elapsed.Round(time.Millisecond))
	require.InDelta(t, want, float64(got), 0.05*want, "%s within ±5 %% of the configured limit", what)
}

func reportCallsOf(reps []*replica) int64 {
	var n int64
	for _, r := range reps {
		n += reportsCalls(r.env)
	}
	return n
}

// TestReplicasShareRedis runs three gateways on one redis-server: the team
// rate and the upstream budget hold for the three together; when Redis
// stops each decides by its own local limits, and when Redis is back they
// share again.
func TestReplicasShareRedis(t *testing.T) {
	srv := redistest.New(t)
	reps := startReplicas(t, srv, 3, ratelimit.FailOpen)
	hc := replicaHTTP(t)
	demo := servertest.Demo()
	demo.HTTP = hc
	batch := &servertest.Client{Key: batchKey, Secret: batchSecret, HTTP: hc}
	research := servertest.Research()
	research.HTTP = hc

	t.Run("team rate", func(t *testing.T) {
		counts, elapsed := drive(t, reps, demo, 3, time.Second, func() string { return "/api/v1/feeds" })
		require.Equal(t, counts[http.StatusOK]+counts[http.StatusTooManyRequests], sum(counts), "only 200 and 429: %v", counts)
		require.Greater(t, counts[http.StatusTooManyRequests], replicaBurst, "driven with more than the limit")
		requireWithin5Percent(t, "admitted", counts[http.StatusOK], replicaBurst, replicaRate, elapsed)
		for i, r := range reps {
			assert.Zero(t, r.fallbacks(t, ratelimit.FailOpen), "replica %d decided without Redis", i)
		}
	})

	t.Run("upstream budget", func(t *testing.T) {
		btc := reps[0].env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
		base := pastTS()
		var next atomic.Int64
		counts, elapsed := drive(t, reps, batch, 3, time.Second, func() string {
			return reportTarget(btc, base, int(next.Add(1))) // every request a cache miss
		})
		require.Equal(t, counts[http.StatusOK]+counts[http.StatusServiceUnavailable], sum(counts), "only 200 and 503: %v", counts)
		require.Greater(t, counts[http.StatusServiceUnavailable], 0, "driven with more than the budget")
		calls := reportCallsOf(reps)
		assert.Equal(t, int64(counts[http.StatusOK]), calls, "each answered miss is one upstream call")
		// The budget is an upper bound: one call, then one per 1/rate. Each
		// grant comes a little after its slot (Redis's round trip, the
		// waiter's timer), and the next slot counts from the grant, so
		// fewer fit; at least 80 %.
		most := 1 + replicaBudget*elapsed.Seconds()
		t.Logf("upstream calls: %d, at most %.1f (1 + %.0f/s × %v)", calls, most, replicaBudget, elapsed.Round(time.Millisecond))
		assert.LessOrEqual(t, float64(calls), most+1, "the replicas together keep to the budget")
		assert.GreaterOrEqual(t, float64(calls), 0.8*most, "and spend most of it")
		var refusals float64
		for _, r := range reps {
			refusals += metricValue(t, r.reg, "streamgate_upstream_budget_refusals_total", map[string]string{"network": "mainnet", "endpoint": "reports"})
		}
		assert.Equal(t, float64(counts[http.StatusServiceUnavailable]), refusals, "every 503 is a counted refusal")
	})

	t.Run("daily quota", func(t *testing.T) {
		daily := &servertest.Client{Key: dailyKey, Secret: dailySecret, HTTP: hc}
		counts, _ := drive(t, reps, daily, 3, 500*time.Millisecond, func() string { return "/api/v1/feeds" })
		require.Equal(t, counts[http.StatusOK]+counts[http.StatusTooManyRequests], sum(counts), "only 200 and 429: %v", counts)
		require.Greater(t, counts[http.StatusTooManyRequests], 0, "driven with more than the quota")
		t.Logf("admitted: %d, daily quota %d", counts[http.StatusOK], dailyQuota)
		assert.Equal(t, dailyQuota, counts[http.StatusOK], "a day's count is exact across replicas")
	})

	t.Run("upstream 429 pauses every replica", func(t *testing.T) {
		btc := reps[0].env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
		latest := func(r *replica) int64 {
			return r.env.Sim.Counters().ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest)
		}
		require.NoError(t, reps[0].env.Sim.SetFaults(upstreamsim.Faults{Force429: 1}))
		resp, body := batch.Get(t, reps[0].env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
		// Nothing held: the gateway's own 503, never the upstream's 429
		// for its budget.
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
		require.NoError(t, reps[0].env.Sim.SetFaults(upstreamsim.Faults{}))
		for i, r := range reps[1:] {
			resp, body := batch.Get(t, r.env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "replica %d: %s", i+1, body)
			assert.GreaterOrEqual(t, retryAfter(t, resp), 50)
			assert.Zero(t, latest(r), "replica %d does not call the paused endpoint", i+1)
		}
	})

	t.Run("fail open", func(t *testing.T) {
		srv.Stop()
		total := 0
		for i, r := range reps {
			start := time.Now()
			admitted := 0
			for range replicaBurst + 5 {
				code, err := status(demo, r.env.Mainnet, "/api/v1/feeds")
				require.NoError(t, err)
				require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, code)
				if code == http.StatusOK {
					admitted++
				}
			}
			requireWithin5Percent(t, "replica "+strconv.Itoa(i)+" alone", admitted, replicaBurst, replicaRate, time.Since(start))
			assert.Positive(t, r.fallbacks(t, ratelimit.FailOpen), "replica %d counts its fallbacks", i)
			assert.Positive(t, metricSum(t, r.reg, "streamgate_redis_errors_total"), "replica %d counts Redis errors", i)
			total += admitted
		}
		assert.Greater(t, total, 2*replicaBurst, "without Redis each replica enforces the full limit on its own")
	})

	t.Run("recovery", func(t *testing.T) {
		srv.Restart() // empty: every bucket full again
		for i, r := range reps {
			// Probe with another team until a request is decided by Redis
			// again (limiter, quota and budget): then no fallback is counted.
			require.Eventually(t, func() bool {
				before := r.fallbacks(t, ratelimit.FailOpen)
				code, err := status(research, r.env.Testnet, "/api/v1/feeds")
				return err == nil && code == http.StatusOK && r.fallbacks(t, ratelimit.FailOpen) == before
			}, 5*time.Second, retryRedis/2, "replica %d back on Redis", i)
		}
		fallbacks := make([]float64, len(reps))
		for i, r := range reps {
			fallbacks[i] = r.fallbacks(t, ratelimit.FailOpen)
		}
		counts, elapsed := drive(t, reps, demo, 3, 500*time.Millisecond, func() string { return "/api/v1/feeds" })
		require.Equal(t, counts[http.StatusOK]+counts[http.StatusTooManyRequests], sum(counts), "only 200 and 429: %v", counts)
		requireWithin5Percent(t, "admitted after recovery", counts[http.StatusOK], replicaBurst, replicaRate, elapsed)
		for i, r := range reps {
			assert.Equal(t, fallbacks[i], r.fallbacks(t, ratelimit.FailOpen), "replica %d decided by Redis", i)
		}
	})
}

// TestReplicasFailClosed: with fail_mode closed, a replica that cannot
// reach Redis refuses with 503 instead of deciding, both the team rate and
// the upstream budget, and serves again once Redis is back.
func TestReplicasFailClosed(t *testing.T) {
	srv := redistest.New(t)
	r := startReplicas(t, srv, 1, ratelimit.FailClosed)[0]
	hc := replicaHTTP(t)
	demo := servertest.Demo()
	demo.HTTP = hc
	batch := &servertest.Client{Key: batchKey, Secret: batchSecret, HTTP: hc}
	btc := r.env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	base := pastTS()

	resp, body := demo.Get(t, r.env.Mainnet, reportTarget(btc, base, 0))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, []string{`"team";q=60;w=60`}, resp.Header.Values("RateLimit-Policy"))
	assert.Equal(t, []string{`"team";r=59;t=1`}, resp.Header.Values("RateLimit"))
	calls := reportsCalls(r.env)

	srv.Stop()
	resp, body = demo.Get(t, r.env.Mainnet, "/api/v1/feeds")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	requireAPIError(t, body)
	assert.GreaterOrEqual(t, retryAfter(t, resp), 1)

	// A team without a rate of its own passes the limiter without Redis,
	// but its cache miss cannot spend the upstream budget.
	resp, body = batch.Get(t, r.env.Mainnet, reportTarget(btc, base, 1))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	requireAPIError(t, body)
	assert.GreaterOrEqual(t, retryAfter(t, resp), 1)
	assert.Equal(t, calls, reportsCalls(r.env), "no upstream call without budget")
	// A cache hit needs no budget.
	resp, body = batch.Get(t, r.env.Mainnet, reportTarget(btc, base, 0))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	assert.Positive(t, r.fallbacks(t, ratelimit.FailClosed))
	assert.Positive(t, metricSum(t, r.reg, "streamgate_redis_errors_total"))

	srv.Restart()
	require.Eventually(t, func() bool {
		code, err := status(demo, r.env.Mainnet, "/api/v1/feeds")
		return err == nil && code == http.StatusOK
	}, 5*time.Second, retryRedis/2, "served again once Redis is back")
	resp, body = batch.Get(t, r.env.Mainnet, reportTarget(btc, base, 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}

func sum(counts map[int]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
