package proxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/ratelimit"
	"streamgate/redisconn"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// pollTeam has a rate far above what the tests send: every request of its
// costs a decision in Redis and none is refused.
const pollTeam, pollKey, pollSecret = "poller", "poller-key", "poller-secret-0123456789"

// startHAReplicas starts three gateways, each with its own simulator,
// whose limits and shared cache tier live in the Redis that redis
// configures (sentinel or cluster), each built from the configuration as
// the binary builds it.
func startHAReplicas(t *testing.T, redis func(*config.Redis)) []*replica {
	t.Helper()
	out := make([]*replica, 3)
	for i := range out {
		env := servertest.Start(t, servertest.Options{Quiet: true, Upstream: retryAfter60, Config: func(c *config.Config) {
			replicaConfig(c)
			c.Teams = append(c.Teams, config.Team{
				Name: pollTeam, Networks: []string{"mainnet"}, Feeds: config.StreamIDs{config.AllFeedsWildcard},
				Rate: config.Rate{RPS: 1e6, Burst: 1e6},
				Keys: []config.Key{{ID: pollKey, Secret: pollSecret}},
			})
			c.RateLimit.Backend = config.BackendRedis
			c.RateLimit.Redis = config.Redis{FailMode: config.FailModeOpen}
			redis(&c.RateLimit.Redis)
			c.Cache.Shared.Backend = config.SharedRedis
			c.Cache.Shared.Sentinel, c.Cache.Shared.Cluster = c.RateLimit.Redis.Sentinel, c.RateLimit.Redis.Cluster
			c.Realtime.Share = false // the stream's sharing is tested on its own
		}})
		out[i] = &replica{env: env, reg: env.Registry}
	}
	return out
}

// redisFailures is a replica's failed Redis calls of kind, of both its
// clients (the limits' and the shared cache tier's).
func redisFailures(t *testing.T, r *replica, kind string) float64 {
	t.Helper()
	var n float64
	for _, client := range []string{"ratelimit", "shared"} {
		n += metricValue(t, r.reg, redisconn.MetricCommandErrors, map[string]string{"client": client, "kind": kind})
	}
	return n
}

// unanswered is what the replicas' limits did, summed over the three,
// when Redis did not answer a call of theirs in time.
type unanswered struct {
	// timeouts are the limits' Redis calls that ran out of their
	// deadline. Each may have been carried out by Redis all the same
	// (the reply came too late), and its request's checks are then made
	// again one by one: a timed-out call can charge a rate or a quota
	// once more than its request.
	timeouts float64
	// local are the decisions made without Redis (fail_mode open), each
	// after a failed call of its own request: each can admit one request
	// that the shared limits would have refused.
	local float64
}

func unansweredOf(t *testing.T, reps []*replica) (u unanswered) {
	t.Helper()
	for _, r := range reps {
		u.timeouts += metricValue(t, r.reg, redisconn.MetricCommandErrors, map[string]string{"client": "ratelimit", "kind": redisconn.KindTimeout})
		u.local += r.fallbacks(t, ratelimit.FailOpen)
	}
	return u
}

func (u unanswered) since(before unanswered) unanswered {
	return unanswered{timeouts: u.timeouts - before.timeouts, local: u.local - before.local}
}

// checkFleet drives the three replicas and checks that they behave as one
// gateway: a catalog view fetched once for all, the team rate within ±5 %
// of the configured one, the daily quota exact, a report fetched once for
// all.
//
// Exact while Redis answers every call in time. A starved machine (the
// suite under -race beside other work) can stall the process past the
// 100 ms deadline of the calls in flight; the replica then rightly makes
// those requests' checks again, or decides them alone. What that can
// cost is bounded and asserted: each timed-out call at most one count
// more (fewer admitted), each local decision at most one admission more.
// What it must not cost is a replica deciding alone for a while: the
// limits' breaker never opens (a moment's stall is one failure however
// many calls it ends), every local decision follows a timeout of its
// own, and no call fails otherwise.
func checkFleet(t *testing.T, reps []*replica) {
	hc := replicaHTTP(t)
	demo := servertest.Demo()
	demo.HTTP = hc

	trips := func(name string) (n float64) {
		for _, r := range reps {
			n += metricValue(t, r.reg, name, map[string]string{"client": "ratelimit"})
		}
		return n
	}
	// First, while no replica has read a view but the warm-up's.
	t.Run("the catalog once per view", func(t *testing.T) {
		catalogCalls := func() (n int64) {
			for _, r := range reps {
				c := r.env.Sim.Counters()
				n += c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointDiscovery) + c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointFeeds)
			}
			return n
		}
		batch := &servertest.Client{Key: batchKey, Secret: batchSecret, HTTP: hc}
		var fetched int64
		for _, view := range []string{"/api/v1/feeds", "/api/v1/feeds?hidden=true", "/api/v1/discovery?asset_class=Crypto"} {
			before := catalogCalls()
			for i, r := range reps {
				code, err := status(batch, r.env.Mainnet, view)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, code, "%s on replica %d", view, i)
			}
			n := catalogCalls() - before
			t.Logf("%s: %d upstream calls for three replicas", view, n)
			assert.LessOrEqual(t, n, int64(1), "%s: one upstream call at most for three replicas", view)
			fetched += n
		}
		assert.Positive(t, fetched, "a view no replica held was fetched (once)")
	})
	t.Run("team rate", func(t *testing.T) {
		trips0, cmds0 := trips(redisconn.MetricRoundTrips), trips(redisconn.MetricCommands)
		before := unansweredOf(t, reps)
		counts, elapsed := drive(t, reps, demo, 3, time.Second, func() string { return "/api/v1/feeds" })
		u := unansweredOf(t, reps).since(before)
		n := float64(sum(counts))
		t.Logf("the limits' Redis per request: %.2f round trips, %.2f commands (%d requests); %.0f calls timed out, %.0f decided alone",
			(trips(redisconn.MetricRoundTrips)-trips0)/n, (trips(redisconn.MetricCommands)-cmds0)/n, sum(counts), u.timeouts, u.local)
		require.Equal(t, counts[http.StatusOK]+counts[http.StatusTooManyRequests], sum(counts), "only 200 and 429: %v", counts)
		require.Greater(t, counts[http.StatusTooManyRequests], replicaBurst, "driven with more than the limit")
		// ±5 % of the configured limit, less what timed-out calls may
		// have charged twice, more what local decisions may have admitted.
		want := float64(replicaBurst) + replicaRate*elapsed.Seconds()
		lo, hi := 0.95*want-u.timeouts, 1.05*want+u.local
		got := float64(counts[http.StatusOK])
		t.Logf("admitted by three replicas: %.0f, expected %.1f (burst %d + %.1f/s × %v): within [%.1f, %.1f]",
			got, want, replicaBurst, replicaRate, elapsed.Round(time.Millisecond), lo, hi)
		assert.GreaterOrEqual(t, got, lo, "admitted by three replicas, at least")
		assert.LessOrEqual(t, got, hi, "admitted by three replicas, at most")
	})
	t.Run("daily quota", func(t *testing.T) {
		daily := &servertest.Client{Key: dailyKey, Secret: dailySecret, HTTP: hc}
		before := unansweredOf(t, reps)
		counts, _ := drive(t, reps, daily, 3, 500*time.Millisecond, func() string { return "/api/v1/feeds" })
		u := unansweredOf(t, reps).since(before)
		require.Greater(t, counts[http.StatusTooManyRequests], 0, "driven with more than the quota")
		// Exact, unless calls timed out (each may have counted a request
		// twice) or were decided alone (each may have admitted one more).
		got := float64(counts[http.StatusOK])
		t.Logf("admitted: %.0f of a daily quota of %d; %.0f calls timed out, %.0f decided alone", got, dailyQuota, u.timeouts, u.local)
		assert.GreaterOrEqual(t, got, dailyQuota-u.timeouts, "a day's count across replicas, at least")
		assert.LessOrEqual(t, got, dailyQuota+u.local, "a day's count across replicas, at most")
	})
	t.Run("a report fetched once for all replicas", func(t *testing.T) {
		batch := &servertest.Client{Key: batchKey, Secret: batchSecret, HTTP: hc}
		btc := reps[0].env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
		target := reportTarget(btc, pastTS(), 7)
		before := reportCallsOf(reps)
		for i, r := range reps {
			code, err := status(batch, r.env.Mainnet, target)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code, "replica %d", i)
		}
		assert.Equal(t, int64(1), reportCallsOf(reps)-before, "one upstream call for three replicas")
	})
	for i, r := range reps {
		u := unansweredOf(t, []*replica{r})
		if u.timeouts > 0 {
			t.Logf("replica %d: %.0f calls of the limits timed out, %.0f requests decided alone", i, u.timeouts, u.local)
		}
		assert.Zero(t, metricValue(t, r.reg, redisconn.MetricBreakerTransitions, map[string]string{"client": "ratelimit", "to": "open"}),
			"replica %d: the limits' breaker opened: the replica decided alone for a while", i)
		assert.LessOrEqual(t, u.local, u.timeouts, "replica %d: every decision without Redis follows a call that timed out", i)
		// (A NOSCRIPT answer, kind reply, is the library loading a script.)
		for _, kind := range []string{redisconn.KindConnection, redisconn.KindCircuitOpen, redisconn.KindCrossSlot, redisconn.KindMoved, redisconn.KindAsk} {
			assert.Zero(t, redisFailures(t, r, kind), "replica %d: Redis answered %s", i, kind)
		}
	}
}

// failoverUnderLoad polls every replica while kill takes the master away
// and wait waits for the failover's end, and checks that no client saw an
// answer other than 200 (fail_mode open decides locally meanwhile) and
// that each replica decides by Redis again after the failover's end,
// without a restart. How long each took is logged, not asserted: it is a
// measure of the machine's load as much as of the gateway.
func failoverUnderLoad(t *testing.T, reps []*replica, kill func(), wait func()) {
	hc := replicaHTTP(t)
	poll := &servertest.Client{Key: pollKey, Secret: pollSecret, HTTP: hc}
	var (
		stop             = make(chan struct{})
		wg               sync.WaitGroup
		mu               sync.Mutex
		answers          = map[int]int{}
		sent, transports atomic.Int64
	)
	const maxPerWorker = 20000 // a bound on the load, whatever happens
	for _, r := range reps {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range maxPerWorker {
					select {
					case <-stop:
						return
					default:
					}
					code, err := status(poll, r.env.Mainnet, "/api/v1/feeds")
					sent.Add(1)
					if err != nil {
						transports.Add(1)
						continue
					}
					mu.Lock()
					answers[code]++
					mu.Unlock()
				}
			}()
		}
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	// Load before the failover: every replica decides by Redis.
	waitSent := func(n int64) {
		require.Eventually(t, func() bool { return sent.Load() >= n }, 30*time.Second, 5*time.Millisecond)
	}
	waitSent(300)
	kill()
	wait()
	ended := time.Now()

	// A replica shares again when, between two looks, it made Redis calls
	// and decided nothing without Redis.
	type look struct{ fallbacks, trips, errs float64 }
	lookAt := func(r *replica) look {
		return look{
			fallbacks: r.fallbacks(t, ratelimit.FailOpen),
			trips:     metricValue(t, r.reg, redisconn.MetricRoundTrips, map[string]string{"client": "ratelimit"}),
			errs:      metricSum(t, r.reg, redisconn.MetricCommandErrors),
		}
	}
	var worst time.Duration
	for i, r := range reps {
		prev := lookAt(r)
		for {
			time.Sleep(20 * time.Millisecond) // the pace of the looks
			cur := lookAt(r)
			if cur.fallbacks == prev.fallbacks && cur.errs == prev.errs && cur.trips > prev.trips {
				break
			}
			prev = cur
			require.Less(t, time.Since(ended), 30*time.Second, "replica %d never shares again", i)
		}
		took := time.Since(ended) - 20*time.Millisecond // sharing since the previous look
		t.Logf("replica %d shares again %v after the failover's end", i, took.Round(time.Millisecond))
		worst = max(worst, took)
	}
	waitSent(sent.Load() + 300) // load after the failover too
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close

	mu.Lock()
	defer mu.Unlock()
	t.Logf("answers during the failover: %v (transport errors %d) of %d requests; every replica shared again within %v",
		answers, transports.Load(), sent.Load(), worst.Round(time.Millisecond))
	assert.Zero(t, transports.Load(), "no request failed")
	assert.Equal(t, answers[http.StatusOK], sum(answers), "fail_mode open: every answer 200: %v", answers)
	var fell float64
	for _, r := range reps {
		fell += r.fallbacks(t, ratelimit.FailOpen)
	}
	t.Logf("requests decided without Redis (fail_mode open) during the failover: %.0f", fell)
}

func TestFleetOnRedisCluster(t *testing.T) {
	cl := redistest.NewCluster(t)
	reps := startHAReplicas(t, func(r *config.Redis) {
		r.Cluster = &config.RedisCluster{Addrs: cl.Addrs()[:3]}
	})
	checkFleet(t, reps)
	t.Run("failover under load", func(t *testing.T) {
		var killed *redistest.Server
		failoverUnderLoad(t, reps,
			func() { killed = cl.KillMaster("{" + pollTeam + "}") },
			func() { t.Logf("cluster failover took %v", cl.WaitFailover(killed)) })
		for i, r := range reps {
			require.Eventually(t, func() bool {
				return metricValue(t, r.reg, redisconn.MetricFailovers, map[string]string{"client": "ratelimit"}) > 0
			}, 5*time.Second, 10*time.Millisecond, "replica %d counts the failover", i)
		}
	})
}

func TestFleetOnRedisSentinel(t *testing.T) {
	s := redistest.NewSentinel(t)
	reps := startHAReplicas(t, func(r *config.Redis) {
		r.Sentinel = &config.RedisSentinel{Master: redistest.SentinelMaster, Addrs: s.Addrs()}
	})
	checkFleet(t, reps)
	t.Run("failover under load", func(t *testing.T) {
		var killed *redistest.Server
		failoverUnderLoad(t, reps,
			func() { killed = s.KillMaster() },
			func() {
				_, took := s.WaitFailover(killed)
				t.Logf("sentinel failover took %v", took)
			})
		for i, r := range reps {
			require.Eventually(t, func() bool {
				return metricValue(t, r.reg, redisconn.MetricFailovers, map[string]string{"client": "ratelimit"}) == 1
			}, 5*time.Second, 10*time.Millisecond, "replica %d counts the failover once", i)
		}
	})
}

// While the limits' Redis cannot be used, /readyz stays 200 (Redis is
// every replica's: taking one out would not help) and says "degraded:
// Redis …" with the cause, as the status page's headline and /status.json
// do; once Redis answers again they say nothing of it.
func TestRedisDownDegradedWithCause(t *testing.T) {
	srv := redistest.New(t)
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		c.RateLimit.Backend = config.BackendRedis
		c.RateLimit.Redis.URL = srv.URL()
		c.Realtime.Share = false
		c.Server.AdminListen = "127.0.0.1:0"
		c.Team(config.DemoTeam).Rate = config.Rate{RPS: 1000, Burst: 1000}
	}})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + env.Server.Addr("admin") + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	headline := func() string {
		env.Server.Status().Sample()
		return env.Server.Status().Snapshot().Health.Summary()
	}
	code, body := readyz()
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"ready"}`, body)
	assert.NotContains(t, headline(), "Redis")

	srv.Stop()
	demo := servertest.Demo()
	// Requests fail over to the local limits (fail_mode open) until the
	// breaker has seen enough failures to open.
	require.Eventually(t, func() bool {
		code, err := status(demo, env.Mainnet, "/api/v1/feeds")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "fail_mode open")
		_, body := readyz()
		return strings.Contains(body, "degraded")
	}, 10*time.Second, 5*time.Millisecond)
	code, body = readyz()
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"status":"degraded: Redis (ratelimit, single) unavailable, breaker`)
	assert.Contains(t, body, "connection refused", "the cause")
	assert.Contains(t, body, "ratelimit.redis.fail_mode (open)")
	assert.Contains(t, headline(), "Degraded: Redis (ratelimit, single) unavailable")

	srv.Restart()
	require.Eventually(t, func() bool {
		_, _ = status(demo, env.Mainnet, "/api/v1/feeds")
		_, body := readyz()
		return strings.Contains(body, `"ready"`)
	}, 10*time.Second, 10*time.Millisecond)
	assert.NotContains(t, headline(), "Redis")
}

// TestAdmissionRoundTrips measures what a signed request's admission costs
// the limits' Redis when every check applies: the replay record, the key's
// rate, the team's rate and the daily quota in one script call (a refused
// check spares the next ones; the signature is recorded only when all
// admit).
func TestAdmissionRoundTrips(t *testing.T) {
	srv := redistest.New(t)
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		c.RateLimit.Backend = config.BackendRedis
		c.RateLimit.Redis.URL = srv.URL()
		c.Realtime.Share = false
		team := c.Team(config.DemoTeam)
		team.Rate = config.Rate{RPS: 1000, Burst: 1000}
		team.DailyQuota = 1_000_000
		for i := range team.Keys {
			team.Keys[i].Rate = config.Rate{RPS: 1000, Burst: 1000}
		}
	}})
	require.True(t, env.Config.Auth.ReplayProtection)
	demo := servertest.Demo()
	trips := func() float64 {
		return metricValue(t, env.Registry, redisconn.MetricRoundTrips, map[string]string{"client": "ratelimit"})
	}
	const requests = 50
	get := func(i int) {
		// Distinct targets: distinct signatures, none a replay.
		code, err := status(demo, env.Mainnet, "/api/v1/feeds?limit="+strconv.Itoa(100+i))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
	}
	// The first request of a script loads it (NOSCRIPT, then EVAL), and
	// the catalog page's first fill spends the upstream budget (one call
	// more): both before the count.
	get(0)
	before := trips()
	for i := range requests {
		get(i + 1)
	}
	per := (trips() - before) / requests
	t.Logf("a signed request with a key rate, a team rate, a daily quota and the replay record: %.2f Redis round trips", per)
	assert.InDelta(t, 1.0, per, 0.05, "the replay record, the rates and the quota in one call")
}

// The admission in one Redis call answers as the checks one by one in
// memory do: the same statuses, RateLimit fields and Retry-After, for a
// key's rate, its team's and the daily quota, each refusing in turn.
func TestAdmissionTogetherAnswersAsOneByOne(t *testing.T) {
	url := redistest.Start(t)
	limits := func(c *config.Config) {
		noReplayCheck(c)
		c.Realtime.Share = false
		team := c.Team(config.DemoTeam)
		team.Rate = config.Rate{RPS: 0.001, Burst: 4}
		team.DailyQuota = 3
		team.Keys[0].Rate = config.Rate{RPS: 0.001, Burst: 2}
		team.Keys = append(team.Keys, config.Key{ID: "second-key", Secret: "second-key-secret-0123456789"})
	}
	memory := servertest.Start(t, servertest.Options{Quiet: true, Config: limits})
	inRedis := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		limits(c)
		c.RateLimit.Backend = config.BackendRedis
		c.RateLimit.Redis.URL = url
	}})
	type answer struct {
		code                 int
		policy, state, retry string
	}
	ask := func(env *servertest.Env, c *servertest.Client) answer {
		req, err := c.Request(context.Background(), env.Mainnet, "/api/v1/feeds")
		require.NoError(t, err)
		resp, err := c.HTTP.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After")}
	}
	first, second := servertest.Demo(), &servertest.Client{Key: "second-key", Secret: "second-key-secret-0123456789", HTTP: http.DefaultClient}
	// The first key's rate refuses its third request (sparing the team's
	// rate and the quota); the daily quota the second key's second (after
	// the team's rate admitted it); the team's rate, empty, the rest.
	sequence := []*servertest.Client{first, first, first, second, second, second}
	codes := map[int]int{}
	resets := regexp.MustCompile(`;t=\d+`) // seconds to a reset: each clock's own
	for i, c := range sequence {
		want, got := ask(memory, c), ask(inRedis, c)
		assert.Equal(t, want.code, got.code, "request %d", i)
		assert.Equal(t, want.policy, got.policy, "request %d", i)
		assert.Equal(t, resets.ReplaceAllString(want.state, ""), resets.ReplaceAllString(got.state, ""), "request %d", i)
		if want.retry != "" || got.retry != "" {
			w, err1 := strconv.Atoi(want.retry)
			g, err2 := strconv.Atoi(got.retry)
			require.NoError(t, errors.Join(err1, err2), "request %d", i)
			assert.InDelta(t, w, g, 1, "request %d: Retry-After", i)
		}
		codes[got.code]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 3}, codes)
	assert.Positive(t, metricValue(t, inRedis.Registry, redisconn.MetricRoundTrips, map[string]string{"client": "ratelimit"}))
}
