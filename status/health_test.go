package status

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache/shared"
	"streamgate/proxy"
	"streamgate/realtime"
	"streamgate/redisconn"
)

// hubFixture is a fixture whose mainnet has a hub with the given
// connections.
func (f *fixture) hubSampler(hub *realtime.Stats) *Sampler {
	return New(Options{Gatherer: f.reg, Interval: 10 * time.Second, Now: func() time.Time { return f.now },
		Facts: func() Facts {
			return Facts{Networks: []NetworkInfo{{Name: "mainnet", BudgetRPS: 10, Hub: func() realtime.Stats { return *hub }}}}
		}})
}

func codes(h Health) []string {
	var out []string
	for _, r := range h.Reasons {
		out = append(out, r.Code)
	}
	return out
}

func TestHealthWellThenEachReason(t *testing.T) {
	f := newFixture()
	hub := &realtime.Stats{FeedsWanted: 3, FeedsSubscribed: 3, FeedsLive: 3, Reconnects: map[string]int64{},
		Connections: []realtime.ConnStats{{Origin: "001", State: "up", Feeds: 3}, {Origin: "002", State: "up", Feeds: 3}}}
	breaker := prometheus.NewGauge(prometheus.GaugeOpts{Name: redisconn.MetricBreakerState})
	replayFull := prometheus.NewCounter(prometheus.CounterOpts{Name: proxy.MetricReplayFull})
	reconnects := prometheus.NewCounterVec(prometheus.CounterOpts{Name: realtime.MetricReconnects}, []string{"network", "reason"})
	f.reg.MustRegister(breaker, replayFull, reconnects)
	s := f.hubSampler(hub)
	f.now = f.now.Add(10 * time.Second)
	f.upstream.WithLabelValues("mainnet", "reports", "200").Inc()
	s.Sample()
	h := s.Snapshot().Health
	assert.Equal(t, StateWell, h.State, "%v", h.Reasons)
	assert.Empty(t, h.Reasons)
	assert.Equal(t, "All well", h.Summary())

	// The REST upstream fails, one origin goes down, the breaker opens,
	// the replay record fills.
	f.now = f.now.Add(10 * time.Second)
	f.errors.WithLabelValues("mainnet", "reports", "transport").Add(3)
	hub.Connections[1].State = "down"
	hub.FeedsLive = 3
	reconnects.WithLabelValues("mainnet", "refused").Add(2)
	breaker.Set(2)
	replayFull.Inc()
	s.Sample()
	snap := s.Snapshot()
	h = snap.Health
	assert.Equal(t, StateDegraded, h.State)
	assert.ElementsMatch(t, []string{ReasonUpstreamDown, ReasonOriginDown, ReasonRedisBreaker, ReasonReplayFull}, codes(h))
	assert.Contains(t, h.Summary(), "origin 002 is down")
	assert.Contains(t, h.Summary(), "Redis breaker open")
	ws := snap.Networks[0].WS
	require.NotNil(t, ws)
	assert.Equal(t, 1, ws.Up)
	assert.Equal(t, 2, ws.Wanted)
	assert.Equal(t, []OriginConns{{"001", 1, 1}, {"002", 0, 1}}, ws.Origins)
	assert.EqualValues(t, 2, ws.Failures)
	require.NotNil(t, ws.LastFailure)
	assert.Equal(t, f.now, *ws.LastFailure)
	assert.Equal(t, "refused", ws.FailureClass)

	// Both origins down: the stream is down, and no feed is live.
	f.now = f.now.Add(10 * time.Second)
	hub.Connections[0].State = "down"
	hub.FeedsLive = 0
	s.Sample()
	h = s.Snapshot().Health
	assert.Contains(t, codes(h), ReasonStreamDown)
	assert.NotContains(t, codes(h), ReasonOriginDown, "the whole stream, not one origin")
	assert.Equal(t, 0, s.Snapshot().Networks[0].Hub.FeedsLive)

	// All back: a success after the failure, connections up, the breaker
	// closed; the replay refusal is still within the last five minutes.
	f.now = f.now.Add(10 * time.Second)
	f.upstream.WithLabelValues("mainnet", "reports", "200").Inc()
	hub.Connections[0].State, hub.Connections[1].State = "up", "up"
	breaker.Set(0)
	s.Sample()
	assert.Equal(t, []string{ReasonReplayFull}, codes(s.Snapshot().Health))
	for range 31 { // past five minutes
		f.now = f.now.Add(10 * time.Second)
		s.Sample()
	}
	assert.Equal(t, StateWell, s.Snapshot().Health.State, "%v", s.Snapshot().Health.Reasons)
}

// TestHealthBudget reads the budget gauges another part of the gateway
// registers: effective below configured is "adapting", equal is not, and
// without the gauges there is no such reason. Use over the last minute at
// the budget, or a refusal, is "saturated".
func TestHealthBudget(t *testing.T) {
	f := newFixture()
	s := f.sampler(90)
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	assert.Equal(t, StateWell, s.Snapshot().Health.State, "no budget gauges: no reason")

	configured := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBudgetRPS}, []string{"network", "endpoint"})
	effective := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBudgetEffectiveRPS}, []string{"network", "endpoint"})
	f.reg.MustRegister(configured, effective)
	configured.WithLabelValues("mainnet", "latest").Set(10)
	effective.WithLabelValues("mainnet", "latest").Set(10)
	configured.WithLabelValues("mainnet", "reports").Set(10)
	effective.WithLabelValues("mainnet", "reports").Set(10)
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	assert.Equal(t, StateWell, s.Snapshot().Health.State, "in force as configured")

	effective.WithLabelValues("mainnet", "latest").Set(4)
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	h := s.Snapshot().Health
	assert.Equal(t, []string{ReasonBudgetAdapting}, codes(h))
	assert.Contains(t, h.Reasons[0].Text, "latest is adapting: 4 calls/s in force of 10 configured")
	assert.Equal(t, "mainnet", h.Reasons[0].Network)
	effective.WithLabelValues("mainnet", "latest").Set(10)

	// 12 calls a second on reports over the last minute: past the budget.
	for range 6 {
		f.now = f.now.Add(10 * time.Second)
		f.upstream.WithLabelValues("mainnet", "reports", "200").Add(120)
		s.Sample()
	}
	assert.Equal(t, []string{ReasonBudgetSaturated}, codes(s.Snapshot().Health))
}

// TestHealthGapUnfilled: a counter of unfilled gaps that grows makes the
// headline degraded for five minutes.
func TestHealthGapUnfilled(t *testing.T) {
	f := newFixture()
	gaps := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricGapsUnfilled}, []string{"network"})
	f.reg.MustRegister(gaps)
	gaps.WithLabelValues("mainnet")
	s := f.sampler(90)
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	assert.Equal(t, StateWell, s.Snapshot().Health.State)
	gaps.WithLabelValues("mainnet").Inc()
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	assert.Equal(t, []string{ReasonGapUnfilled}, codes(s.Snapshot().Health))
}

// TestNoUpstreamCallShare: answers from memory, the shared tier, the
// stream, stale entries and coalesced waits all cost no upstream call; the
// old hit ratio left the stream out.
func TestNoUpstreamCallShare(t *testing.T) {
	f := newFixture()
	saved := prometheus.NewCounter(prometheus.CounterOpts{Name: shared.MetricFillsSaved})
	f.reg.MustRegister(saved)
	s := f.sampler(90)
	f.now = f.now.Add(10 * time.Second)
	f.cache.WithLabelValues("mainnet", "latest", "hit").Add(3)
	f.cache.WithLabelValues("mainnet", "latest", "stream").Add(28)
	f.cache.WithLabelValues("mainnet", "latest", "stale").Add(1)
	f.cache.WithLabelValues("mainnet", "report", "miss").Add(8)
	saved.Add(2) // two of the misses were filled from Redis
	f.requests.WithLabelValues("mainnet", "ws", "101", "demo").Add(5)
	s.Sample()
	snap := s.Snapshot()
	free := snap.Cache.Free
	assert.Equal(t, NoUpstreamCall{Lookups: 40, Free: 34, Share: 34.0 / 40, Memory: 3, Shared: 2, Stream: 28, Stale: 1}, free)
	assert.InDelta(t, 4.0/40, snap.Cache.HitRatio, 1e-9, "the old ratio: hit and stale only")
	assert.Equal(t, []float64{34.0 / 40}, snap.FreeShare)
	assert.EqualValues(t, 32, snap.Networks[0].Free.Free, "per network, without the shared tier")
	assert.Equal(t, map[string]int64{"1xx": 5}, snap.Teams[0].Answers)

	srv := httptest.NewServer(Handler(s, ""))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	assert.Contains(t, page, `<td class="n free-share">85.0 % (34)</td>`)
	assert.Contains(t, page, `<td class="n free-stream">28</td>`)
	assert.Contains(t, page, `<td class="n free-shared">2</td>`)
	assert.Contains(t, page, "1xx 5", "WebSocket upgrades in the teams' answers")
	assert.True(t, strings.Contains(page, `data-state="well"`))
}

// The Redis clients' own word (Facts.Redis) makes the headline, cause
// included, in place of the bare breaker state.
func TestHealthRedisCause(t *testing.T) {
	f := newFixture()
	breaker := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: redisconn.MetricBreakerState}, []string{"client"})
	f.reg.MustRegister(breaker)
	var redis []string
	s := New(Options{Gatherer: f.reg, Interval: 10 * time.Second, Now: func() time.Time { return f.now },
		Facts: func() Facts { return Facts{Redis: redis} }})
	s.Sample()
	assert.Equal(t, StateWell, s.Snapshot().Health.State)

	breaker.WithLabelValues("ratelimit").Set(2)
	redis = []string{"Redis (ratelimit, cluster) unavailable, breaker open: calls fail at once; last failure: dial tcp 10.0.0.1:6379: connect: connection refused"}
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	h := s.Snapshot().Health
	assert.Equal(t, []string{ReasonRedisBreaker}, codes(h), "one reason, with its cause")
	assert.Equal(t, "Degraded: "+redis[0], h.Summary())

	redis = nil
	breaker.WithLabelValues("ratelimit").Set(0)
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	assert.Equal(t, StateWell, s.Snapshot().Health.State)
}

// The archive's own word (Facts.Archive) makes the headline.
func TestHealthArchive(t *testing.T) {
	f := newFixture()
	var archive []string
	s := New(Options{Gatherer: f.reg, Interval: 10 * time.Second, Now: func() time.Time { return f.now },
		Facts: func() Facts { return Facts{Archive: archive} }})
	s.Sample()
	assert.Equal(t, StateWell, s.Snapshot().Health.State)

	archive = []string{"archive: reads fail (unavailable); requests go to the upstream"}
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	h := s.Snapshot().Health
	assert.Equal(t, []string{ReasonArchive}, codes(h))
	assert.Equal(t, "Degraded: "+archive[0], h.Summary())

	archive = nil
	f.now = f.now.Add(10 * time.Second)
	s.Sample()
	assert.Equal(t, StateWell, s.Snapshot().Health.State)
}
