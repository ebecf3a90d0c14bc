package status

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture is a registry with the families the sampler reads and a clock
// the test moves.
type fixture struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	upstream *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	cache    *prometheus.CounterVec
	limited  *prometheus.CounterVec
	now      time.Time
}

func newFixture() *fixture {
	f := &fixture{reg: prometheus.NewRegistry(), now: time.Date(2026, 1, 2, 23, 59, 0, 0, time.UTC)}
	f.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_requests_total"}, []string{"network", "endpoint", "code", "team"})
	f.upstream = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_upstream_requests_total"}, []string{"network", "endpoint", "code"})
	f.errors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_upstream_errors_total"}, []string{"network", "endpoint", "reason"})
	f.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "streamgate_upstream_duration_seconds", Buckets: []float64{.01, .1, 1}}, []string{"network", "endpoint"})
	f.cache = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_cache_results_total"}, []string{"network", "kind", "result"})
	f.limited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ratelimit_rejections_total"}, []string{"team", "limit"})
	f.reg.MustRegister(f.requests, f.upstream, f.errors, f.duration, f.cache, f.limited)
	return f
}

func (f *fixture) sampler(samples int) *Sampler {
	return New(Options{Gatherer: f.reg, Interval: 10 * time.Second, Samples: samples, Now: func() time.Time { return f.now },
		Facts: func() Facts {
			return Facts{Version: "v1", MaxBytes: 1 << 20,
				Networks: []NetworkInfo{{Name: "mainnet", BudgetRPS: 10}},
				Teams:    []TeamInfo{{Name: "demo"}, {Name: "research", DailyQuota: 100}}}
		}})
}

func TestSamplerRatesSeriesAndRing(t *testing.T) {
	f := newFixture()
	s := f.sampler(4)
	for i := range 5 {
		f.now = f.now.Add(10 * time.Second)
		f.requests.WithLabelValues("mainnet", "reports", "200", "demo").Add(float64(10 * (i + 1)))
		f.upstream.WithLabelValues("mainnet", "reports", "200").Add(50)
		f.cache.WithLabelValues("mainnet", "report", "hit").Add(3)
		f.cache.WithLabelValues("mainnet", "report", "miss").Add(1)
		s.Sample()
	}
	snap := s.Snapshot()
	// The ring keeps 4 samples: 3 intervals.
	require.Len(t, snap.Networks[0].RequestRate, 3)
	assert.InDeltaSlice(t, []float64{3, 4, 5}, snap.Networks[0].RequestRate, 1e-9)
	assert.InDeltaSlice(t, []float64{.75, .75, .75}, snap.HitRatio, 1e-9)
	assert.InDeltaSlice(t, []float64{.5, .5, .5}, snap.Networks[0].BudgetUse, 1e-9, "5 calls/s of 10")
	assert.EqualValues(t, 150, snap.Networks[0].Requests)
	assert.InDelta(t, .75, snap.Cache.HitRatio, 1e-9)
	assert.InDelta(t, .75, snap.Networks[0].HitRatio, 1e-9, "the network's own lookups")
	assert.Equal(t, 30.0, snap.Window)
	require.Len(t, snap.Networks[0].Budget, 1)
	assert.InDelta(t, .5, snap.Networks[0].Budget[0].Use, 1e-9)
}

func TestSamplerUpstreamEventsAndTeams(t *testing.T) {
	f := newFixture()
	s := f.sampler(90)
	f.now = f.now.Add(10 * time.Second)
	f.upstream.WithLabelValues("mainnet", "reports", "200").Inc()
	s.Sample()
	ok := f.now
	f.now = f.now.Add(10 * time.Second)
	f.errors.WithLabelValues("mainnet", "reports", "timeout").Add(2)
	f.upstream.WithLabelValues("mainnet", "reports", "503").Inc()
	f.requests.WithLabelValues("mainnet", "reports", "200", "research").Add(3)
	f.requests.WithLabelValues("mainnet", "reports", "429", "research").Add(1)
	f.limited.WithLabelValues("research", "team").Add(1)
	s.Sample()
	up := s.Snapshot().Networks[0].Upstream
	require.NotNil(t, up.LastSuccess)
	assert.Equal(t, ok, *up.LastSuccess)
	require.NotNil(t, up.LastFailure)
	assert.Equal(t, f.now, *up.LastFailure)
	assert.Equal(t, "timeout", up.FailureClass, "the most frequent class")
	assert.EqualValues(t, 3, up.Failures)

	var research Team
	for _, tm := range s.Snapshot().Teams {
		if tm.Name == "research" {
			research = tm
		}
	}
	assert.EqualValues(t, 4, research.Requests)
	assert.EqualValues(t, 1, research.RateLimited)
	assert.InDelta(t, .25, research.RateLimitedShare, 1e-9)
	assert.Equal(t, map[string]int64{"2xx": 3, "429": 1}, research.Answers)
	assert.EqualValues(t, 3, research.AdmittedToday)
	assert.EqualValues(t, 100, research.DailyQuota)

	// Past midnight UTC, "admitted today" starts again.
	f.now = f.now.Add(time.Minute)
	f.requests.WithLabelValues("mainnet", "reports", "200", "research").Add(2)
	s.Sample()
	for _, tm := range s.Snapshot().Teams {
		if tm.Name == "research" {
			assert.EqualValues(t, 2, tm.AdmittedToday)
			assert.EqualValues(t, 6, tm.Requests)
		}
	}
}

func TestQuantile(t *testing.T) {
	bounds := []float64{.01, .1, 1, math.Inf(1)}
	assert.InDelta(t, .005, quantile(.5, bounds, []float64{100, 100, 100, 100}), 1e-12)
	assert.InDelta(t, .055, quantile(.5, bounds, []float64{0, 100, 100, 100}), 1e-12)
	assert.InDelta(t, 1, quantile(.99, bounds, []float64{0, 0, 0, 100}), 1e-12, "in +Inf: the highest bound")
	assert.True(t, math.IsNaN(quantile(.5, bounds, []float64{0, 0, 0, 0})))

	f := newFixture()
	s := f.sampler(90)
	f.now = f.now.Add(10 * time.Second)
	for range 99 {
		f.duration.WithLabelValues("mainnet", "reports").Observe(.005)
	}
	f.duration.WithLabelValues("mainnet", "reports").Observe(.5)
	s.Sample()
	up := s.Snapshot().Networks[0].Upstream
	require.NotNil(t, up.P50ms)
	assert.InDelta(t, 5.05, *up.P50ms, .01)
	assert.InDelta(t, 10, *up.P99ms, .01)
}

func TestSamplerStartStop(t *testing.T) {
	f := newFixture()
	s := New(Options{Gatherer: f.reg, Interval: time.Millisecond})
	first := s.Snapshot()
	s.Start()
	require.Eventually(t, func() bool { return s.Snapshot() != first }, 5*time.Second, time.Millisecond)
	s.Stop()
	s.Stop()
	New(Options{}).Stop() // never started
}

func TestHandler(t *testing.T) {
	f := newFixture()
	f.requests.WithLabelValues("mainnet", "reports", "200", "demo").Inc()
	s := f.sampler(90)

	srv := httptest.NewServer(Handler(s, ""))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	csp := resp.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "default-src 'none'")
	assert.Contains(t, csp, "frame-ancestors 'none'")
	assert.NotContains(t, csp, "unsafe")
	assert.NotContains(t, string(body), "<script")
	assert.Contains(t, string(body), "<svg")
	assert.Contains(t, string(body), `id="team-demo"`)
	assert.Contains(t, string(body), "<style>"+pageCSS+"</style>", "the style's text is exactly what the CSP hashes")

	resp, err = http.Get(srv.URL + "/status.json")
	require.NoError(t, err)
	var snap Snapshot
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&snap))
	resp.Body.Close()
	assert.Equal(t, "v1", snap.Version)

	// With a token.
	tok := httptest.NewServer(Handler(s, "s3cret-token"))
	defer tok.Close()
	for _, path := range []string{"/", "/status.json"} {
		resp, err := http.Get(tok.URL + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		assert.False(t, strings.Contains(string(b), "s3cret"), path)
		req, _ := http.NewRequest(http.MethodGet, tok.URL+path, nil)
		req.Header.Set("Authorization", "Bearer s3cret-token")
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
}

// TestBudgetRates: the budget's configured rate, its rate in force and its
// adjustments, as the ratelimit package exports them, make the endpoint's
// row, marked when slowed.
func TestBudgetRates(t *testing.T) {
	f := newFixture()
	rps := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_upstream_budget_rps"}, []string{"network", "endpoint"})
	eff := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_upstream_budget_effective_rps"}, []string{"network", "endpoint"})
	adj := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_upstream_budget_adjustments_total"}, []string{"network", "endpoint", "direction"})
	f.reg.MustRegister(rps, eff, adj)
	rps.WithLabelValues("mainnet", "latest").Set(10)
	eff.WithLabelValues("mainnet", "latest").Set(6)
	adj.WithLabelValues("mainnet", "latest", "down").Add(2)
	adj.WithLabelValues("mainnet", "latest", "up").Add(3)
	rps.WithLabelValues("mainnet", "bulk").Set(10)
	eff.WithLabelValues("mainnet", "bulk").Set(10)
	s := f.sampler(90)
	f.now = f.now.Add(10 * time.Second)
	s.Sample()

	snap := s.Snapshot()
	require.Len(t, snap.Networks[0].Budget, 2)
	bulk, latest := snap.Networks[0].Budget[0], snap.Networks[0].Budget[1]
	assert.Equal(t, Endpoint{Endpoint: "latest", RPS: 10, EffectiveRPS: 6, Slowdowns: 2, Recoveries: 3}, latest)
	assert.True(t, latest.Slowed())
	assert.False(t, bulk.Slowed())

	srv := httptest.NewServer(Handler(s, ""))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `<td class="n bad">6 / 10/s</td><td class="n">2 / 3</td>`, "the slowed endpoint's row")
	assert.Contains(t, string(body), `<td class="n">10 / 10/s</td><td class="n">0 / 0</td>`, "the other's")
}
