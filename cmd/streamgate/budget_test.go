package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/upstreamsim"
)

// The upstream budget against an independent upstream: the simulator as a
// process of its own (tools/streams-sim, built without the race detector)
// on loopback listeners, counting its limit per key and endpoint in one
// of its modes, and real gateway processes configured with the published
// figure and the example's burst. The simulator counts a call at the time
// it reached its host, the kernel's receive time, as an upstream's front
// counts it, not at the time its own process got round to it: on a busy
// machine that came up to 209 ms later, differing from one call to the
// next, so that calls written at least 109 ms apart were handled as
// close as 6 ms. Its
// counters, streams and refusals are read over its control API; when it
// refused a call, the test logs the call times it had accepted before, so
// that a failure shows how close together the calls reached it.

// simBinary builds tools/streams-sim once, without the race detector, beside
// the streamgate binary under test (TestMain removes both).
var simBinary = sync.OnceValues(func() (string, error) {
	path := filepath.Join(filepath.Dir(binary), "streams-sim")
	out, err := exec.Command("go", "build", "-o", path, "streamgate/tools/streams-sim").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building streams-sim: %w: %s", err, out)
	}
	return path, nil
})

// simProc is a streams-sim process: its mainnet API and its control API.
type simProc struct {
	mainnet, control string
}

// budgetUpstream starts a streams-sim process that allows limit requests
// per second per key and endpoint, counted as mode says (a bucket: of
// burst 1), and returns it with its mainnet URL.
func budgetUpstream(t *testing.T, limit int, mode upstreamsim.RateMode) (*simProc, string) {
	t.Helper()
	bin, err := simBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, "-mainnet", "127.0.0.1:0", "-testnet", "127.0.0.1:0", "-control", "127.0.0.1:0",
		"-rate", strconv.Itoa(limit), "-rate-mode", mode.String(), "-burst", "1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	// The banner names the listeners: "  mainnet  http://127.0.0.1:PORT ...".
	urls := make(chan map[string]string, 1)
	go func() {
		found := map[string]string{}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && (f[0] == "mainnet" || f[0] == "control") && strings.HasPrefix(f[1], "http://") {
				found[f[0]] = f[1]
				if len(found) == 2 {
					urls <- found
					break
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-urls:
		return &simProc{mainnet: u["mainnet"], control: u["control"]}, u["mainnet"]
	case <-time.After(30 * time.Second): // a bound on a failure, not a wait
		t.Fatal("streams-sim did not name its listeners")
		return nil, ""
	}
}

// getJSON decodes the answer of the simulator's control API at path.
func (s *simProc) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(s.control + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, path)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v), path)
}

// Counters reads the simulator's request counters.
func (s *simProc) Counters(t *testing.T) upstreamsim.Counters {
	var c upstreamsim.Counters
	s.getJSON(t, "/counters", &c)
	return c
}

// logRefusals logs the requests the simulator refused with the call times
// of the same key and endpoint it had accepted before each, and the gap
// to the last of them: the spacing as the upstream saw it; and how long
// after its arrival the simulator handled the refused one.
func (s *simProc) logRefusals(t *testing.T) {
	var refusals []upstreamsim.RateRefusal
	s.getJSON(t, "/refusals", &refusals)
	for _, r := range refusals {
		var times []string
		for _, a := range r.Accepted {
			times = append(times, a.Format("15:04:05.000"))
		}
		gap := "none before"
		if n := len(r.Accepted); n > 0 {
			gap = r.At.Sub(r.Accepted[n-1]).String()
		}
		t.Logf("upstream refused %s %s arrived at %s (handled %v later): %s after the last accepted call; accepted before: %s",
			r.Endpoint, r.Key, r.At.Format("15:04:05.000"), r.Handled.Sub(r.At), gap, strings.Join(times, " "))
	}
}

// budgetConfig is a gateway of mainnet in front of upstream with the
// budget of config.example.yaml, refreshing latest reports as shipped
// (served stale while refreshed, bulk refresh on) and without an upstream
// WebSocket; its limits in memory, or in the Redis at redisURL, which also
// holds the cache tier shared by the replicas when there is one.
func budgetConfig(upstream, redisURL string) string {
	limits, shared := "{backend: memory}", "{backend: off}"
	if redisURL != "" {
		limits = fmt.Sprintf("{backend: redis, redis: {url: %q}}", redisURL)
		shared = fmt.Sprintf("{backend: redis, url: %q}", redisURL)
	}
	return fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
log: {level: info}
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream:
      url: %s
      api_key: %s
      api_secret: %s
      budget: {rps: 10, burst: 10}
auth:
  anonymous_rate: {rps: 0}
realtime:
  latest_from_stream: false
cache:
  shared: %s
ratelimit: %s
teams:
  - name: demo
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
`, upstream, upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, shared, limits, config.DemoKeyID, config.DemoKeySecret)
}

// latestTally is what a polling load saw.
type latestTally struct {
	mu       sync.Mutex
	status   map[int]int
	errors   []error
	staleAge int // the largest Age of a STALE answer, seconds
	stale    int
	answers  []answer
}

// answer is one answer's arrival and status.
type answer struct {
	at     time.Time
	status int
}

// within returns the statuses of the answers that arrived between from and
// to.
func (l *latestTally) within(from, to time.Time) map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for _, a := range l.answers {
		if !a.at.Before(from) && !a.at.After(to) {
			out[a.status]++
		}
	}
	return out
}

func (l *latestTally) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("statuses %v, errors %d, stale %d (largest Age %ds)", l.status, len(l.errors), l.stale, l.staleAge)
}

// pollLatest has workers clients ask latest of feeds at random bases, each
// every 100 ms, until stop is closed or d has passed; each client sends at
// most d/100ms + 1 requests.
func pollLatest(s *signer, bases, feeds []string, workers int, d time.Duration, stop <-chan struct{}) *latestTally {
	const every = 100 * time.Millisecond
	tally := &latestTally{status: map[int]int{}}
	hc := &http.Client{Timeout: 10 * time.Second}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			next := time.Now().Add(every * time.Duration(w) / time.Duration(workers))
			for i := 0; i <= int(d/every); i++ {
				if wait := time.Until(next); wait > 0 {
					select {
					case <-time.After(wait):
					case <-stop:
						return
					}
				}
				if !time.Now().Before(end) {
					return
				}
				next = next.Add(every)
				url := bases[(w+i)%len(bases)] + "/api/v1/reports/latest?feedID=" + feeds[(w*7+i)%len(feeds)]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, body, err := fetch(ctx, hc, s, url)
				cancel()
				tally.mu.Lock()
				if err != nil {
					tally.errors = append(tally.errors, err)
				} else {
					tally.status[resp.StatusCode]++
					tally.answers = append(tally.answers, answer{time.Now(), resp.StatusCode})
					if resp.StatusCode != http.StatusOK {
						tally.errors = append(tally.errors, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body))))
					}
					if resp.Header.Get("X-Cache") == "STALE" {
						tally.stale++
						age, _ := strconv.Atoi(resp.Header.Get("Age"))
						tally.staleAge = max(tally.staleAge, age)
					}
				}
				tally.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return tally
}

// warmLatest asks latest of every feed until each has answered 200 once:
// afterwards every stream is held, and answered at once (fresh or stale).
func warmLatest(t *testing.T, s *signer, base string, feeds []string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, f := range feeds {
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, _, err := fetch(ctx, hc, s, base+"/api/v1/reports/latest?feedID="+f)
			return err == nil && resp.StatusCode == http.StatusOK
		}, 30*time.Second, 100*time.Millisecond, "latest of %s", f)
	}
}

// publishingFeeds returns n public mainnet streams of sim that publish
// now (a live stream may have ended, or not have begun).
func publishingFeeds(t *testing.T, sim *simProc, n int) []string {
	t.Helper()
	var streams []upstreamsim.StreamState
	sim.getJSON(t, "/streams?network="+upstreamsim.Mainnet, &streams)
	now := time.Now().Unix()
	var out []string
	for _, st := range streams {
		if !st.Hidden && st.First <= st.Last && st.Last >= now-5 && len(out) < n {
			out = append(out, st.FeedID)
		}
	}
	require.Len(t, out, n, "streams publishing now")
	return out
}

// upstreamReportCalls is the number of latest and bulk calls the
// simulator has answered, whatever their status.
func upstreamReportCalls(t *testing.T, sim *simProc) int64 {
	c := sim.Counters(t)
	return c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest) + c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointBulk)
}

// TestBudgetHoldsUnderEveryCounting: a gateway configured with the
// published limit and the example's burst ({rps: 10, burst: 10}) draws no
// upstream 429 from an upstream that counts its 10 per second as a burst-1
// bucket, per calendar second or in a sliding second, while clients poll
// latest of 24 streams at 120 requests per second and all get 200. The
// bucket runs with the memory budget, the calendar one with the Redis
// budget, the sliding one with two replicas sharing the Redis budget.
func TestBudgetHoldsUnderEveryCounting(t *testing.T) {
	tests := []struct {
		mode     upstreamsim.RateMode
		redis    bool
		replicas int
	}{
		{mode: upstreamsim.RateBucket, replicas: 1},
		{mode: upstreamsim.RateCalendar, redis: true, replicas: 1},
		{mode: upstreamsim.RateSliding, redis: true, replicas: 2},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			sim, upstream := budgetUpstream(t, 10, tc.mode)
			redisURL := ""
			if tc.redis {
				redisURL = redistest.New(t).URL()
			}
			var bases []string
			var procs []*proc
			for range tc.replicas {
				p := start(t, budgetConfig(upstream, redisURL), []string{"mainnet"})
				waitReady(t, p)
				procs = append(procs, p)
				bases = append(bases, p.net["mainnet"])
			}
			s := newSigner(config.DemoKeyID, config.DemoKeySecret)
			feeds := publishingFeeds(t, sim, 24)
			for _, b := range bases {
				warmLatest(t, s, b, feeds)
			}
			before := upstreamReportCalls(t, sim)

			tally := pollLatest(s, bases, feeds, 12, 8*time.Second, nil)
			n429 := sim.Counters(t).ByStatus(http.StatusTooManyRequests)
			t.Logf("%s: clients %s; upstream: %d latest and bulk calls during the load, %d 429s in all",
				tc.mode, tally, upstreamReportCalls(t, sim)-before, n429)
			if n429 > 0 {
				sim.logRefusals(t)
			}

			assert.Zero(t, n429, "no upstream 429, from the start")
			require.Empty(t, tally.errors, "every client request answered 200")
			assert.Greater(t, tally.status[http.StatusOK], 500, "the load ran")
			assert.Greater(t, upstreamReportCalls(t, sim)-before, int64(20), "the budget was spent on refreshes")
			for i, p := range procs {
				v, ok := sample(scrape(t, p), "streamgate_upstream_budget_adjustments_total", map[string]string{"direction": "down"})
				assert.False(t, ok && v > 0, "replica %d never slowed its budget (%v)", i, v)
			}
		})
	}
}

// TestBudgetLearnsALowerLimit: the upstream allows 5 per second (a
// burst-1 bucket, the strictest counting), half what two replicas sharing
// a Redis budget are configured with. The gateway draws 429s, slows, and
// converges: its 429 count stops growing while the load goes on and the
// upstream is still called; clients keep getting 200s, stale within
// latest_max_stale.
func TestBudgetLearnsALowerLimit(t *testing.T) {
	sim, upstream := budgetUpstream(t, 5, upstreamsim.RateBucket)
	redisURL := redistest.New(t).URL()
	procs := []*proc{
		start(t, budgetConfig(upstream, redisURL), []string{"mainnet"}),
		start(t, budgetConfig(upstream, redisURL), []string{"mainnet"}),
	}
	var bases []string
	for _, p := range procs {
		waitReady(t, p)
		bases = append(bases, p.net["mainnet"])
	}
	s := newSigner(config.DemoKeyID, config.DemoKeySecret)
	feeds := publishingFeeds(t, sim, 24)
	for _, b := range bases {
		warmLatest(t, s, b, feeds)
	}

	stop := make(chan struct{})
	done := make(chan *latestTally, 1)
	go func() { done <- pollLatest(s, bases, feeds, 12, 60*time.Second, stop) }()
	stopped := false
	stopLoad := func() *latestTally {
		if !stopped {
			close(stop)
			stopped = true
		}
		return <-done
	}
	t.Cleanup(func() {
		if !stopped {
			stopLoad()
		}
	})

	// Converged: six samples a second apart (five seconds) without a new
	// 429 while the upstream is still called.
	type point struct {
		at          time.Time
		n429, calls int64
	}
	var points []point
	var window []point
	for range 50 {
		time.Sleep(time.Second)
		c := sim.Counters(t)
		points = append(points, point{time.Now(), c.ByStatus(http.StatusTooManyRequests), upstreamReportCalls(t, sim)})
		if n := len(points); n >= 6 {
			first, last := points[n-6], points[n-1]
			if last.n429 == first.n429 && last.calls > first.calls {
				window = []point{first, last}
				break
			}
		}
	}
	tally := stopLoad()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i, p := range procs {
			p.mu.Lock()
			for _, l := range p.raw {
				if strings.Contains(l, "upstream budget") || strings.Contains(l, "redis") || strings.Contains(l, "Redis") {
					t.Logf("replica %d: %s", i, l)
				}
			}
			p.mu.Unlock()
		}
	})
	var trace []string
	for _, p := range points {
		trace = append(trace, fmt.Sprintf("%d/%d", p.n429, p.calls))
	}
	t.Logf("upstream 429s/latest and bulk calls, a second apart: %s; clients: %s", strings.Join(trace, " "), tally)
	require.NotNil(t, window, "the upstream's 429 count stopped growing while it was still called")
	assert.Positive(t, points[len(points)-1].n429, "the lower limit was met: the gateway learned it from 429s")

	// While it learned, clients kept getting answers: a 503 of the
	// gateway's own at worst, never the upstream's 429.
	all := 0
	for _, n := range tally.status {
		all += n
	}
	assert.Greater(t, tally.status[http.StatusOK], 100, "the load ran")
	assert.Equal(t, all, tally.status[http.StatusOK]+tally.status[http.StatusServiceUnavailable], "only 200 and 503: %v", tally.status)
	assert.GreaterOrEqual(t, float64(tally.status[http.StatusOK]), 0.95*float64(all), "most answers are reports while the budget learns")
	const maxStaleAge = 3 // latest_ttl 500ms + latest_max_stale 3s, in the whole seconds of Age
	assert.LessOrEqual(t, tally.staleAge, maxStaleAge, "stale answers within latest_max_stale")
	// Once it has converged, the answers are reports: at 5 calls a second
	// for 24 streams a refresh can still miss latest_max_wait now and then
	// on a loaded machine (a CI run saw 3 of 601), which the client gets as
	// the gateway's own 503 with Retry-After, never an upstream 429 or 502.
	converged := tally.within(window[0].at, window[1].at)
	t.Logf("answers while converged: %v", converged)
	convergedAll := 0
	for _, n := range converged {
		convergedAll += n
	}
	assert.Positive(t, converged[http.StatusOK])
	assert.Equal(t, convergedAll, converged[http.StatusOK]+converged[http.StatusServiceUnavailable], "only 200 and the gateway's 503 once converged: %v", converged)
	assert.GreaterOrEqual(t, float64(converged[http.StatusOK]), 0.99*float64(convergedAll), "reports once converged: %v", converged)

	var downs, downLogs float64
	for i, p := range procs {
		fams := scrape(t, p)
		for _, name := range []string{"streamgate_upstream_budget_effective_rps", "streamgate_upstream_budget_adjustments_total"} {
			if fam := fams[name]; fam != nil {
				for _, m := range fam.GetMetric() {
					t.Logf("replica %d: %s %v %v", i, name, labelsOf(m), value(m))
				}
			}
		}
		slowed := false
		for _, ep := range []string{"latest", "bulk"} {
			eff, ok1 := sample(fams, "streamgate_upstream_budget_effective_rps", map[string]string{"endpoint": ep})
			rps, ok2 := sample(fams, "streamgate_upstream_budget_rps", map[string]string{"endpoint": ep})
			if ok1 && ok2 {
				assert.EqualValues(t, 10, rps, "replica %d: the configured rate of %s", i, ep)
				slowed = slowed || eff < rps
			}
		}
		assert.True(t, slowed, "replica %d runs a slower budget than configured", i)
		fam := fams["streamgate_upstream_budget_adjustments_total"]
		if fam != nil {
			for _, m := range fam.GetMetric() {
				if labelsOf(m)["direction"] == "down" {
					downs += value(m)
				}
			}
		}
		downLogs += float64(countLogs(p, "upstream budget slowed"))
	}
	assert.Positive(t, downs, "slowdowns are counted")
	assert.Equal(t, downs, downLogs, "one log line per slowdown, on the replica that made it")
}

// countLogs counts p's log lines whose message contains s.
func countLogs(p *proc, s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.Contains(l.str("msg"), s) {
			n++
		}
	}
	return n
}
