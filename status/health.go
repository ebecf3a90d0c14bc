package status

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"streamgate/cache/shared"
	"streamgate/proxy"
	"streamgate/ratelimit"
	"streamgate/realtime"
	"streamgate/redisconn"
)

// Metric names of the budget, exported for the tests that register them
// (the sampler takes every name it reads from the package that registers
// the metric: a rename breaks the build, not the page).
const (
	// MetricBudgetRPS is the upstream budget per endpoint as configured
	// (gauge; labels network, endpoint).
	MetricBudgetRPS = ratelimit.MetricBudgetRPS
	// MetricBudgetEffectiveRPS is the upstream budget per endpoint in
	// force (gauge; labels network, endpoint): below MetricBudgetRPS while
	// the gateway adapts to an upstream that pushes back.
	MetricBudgetEffectiveRPS = ratelimit.MetricBudgetEffectiveRPS
)

// MetricGapsUnfilled counts the (stream, second) pairs of stream gaps that
// could not be filled (counter; label network); realtime registers it.
const MetricGapsUnfilled = realtime.MetricGapsUnfilled

// The headline's states.
const (
	StateWell     = "well"
	StateDegraded = "degraded"
)

// The reasons' codes, one per kind of trouble.
const (
	ReasonUpstreamDown    = "upstream_down"     // the network's last REST calls failed
	ReasonStreamDown      = "stream_down"       // every upstream WebSocket connection is down
	ReasonOriginDown      = "origin_down"       // every connection to one HA origin is down
	ReasonRedisBreaker    = "redis_breaker"     // a Redis client cannot use Redis: its circuit breaker is open
	ReasonSharedCache     = "shared_cache_down" // the shared cache tier's Redis does not answer
	ReasonBudgetSaturated = "budget_saturated"  // an endpoint used its whole upstream budget
	ReasonBudgetAdapting  = "budget_adapting"   // an endpoint's budget in force is below the configured one
	ReasonReplayFull      = "replay_full"       // the replay record was full: requests got 503
	ReasonGapUnfilled     = "gap_unfilled"      // a stream's gap was not filled
	ReasonArchive         = "archive_degraded"  // the archive is not open, its reads fail, or its writes are dropped
)

// Health is the page's headline: all well, or degraded with every reason.
type Health struct {
	State   string   `json:"state"` // well or degraded
	Reasons []Reason `json:"reasons"`
}

// Reason is one thing that is not well.
type Reason struct {
	Code    string `json:"code"`
	Network string `json:"network,omitempty"`
	Text    string `json:"text"`
}

// Thresholds of the headline.
const (
	// budgetSaturatedUse is the share of an endpoint's budget (calls per
	// second over the last minute over budget.rps) from which it is
	// saturated; the gateway keeps one token in reserve, so a busy
	// endpoint stays a little under 1.
	budgetSaturatedUse = 0.9
	// recent is how far back a failure, a refusal or a counted event
	// still makes the headline degraded.
	recent = latencyWindow
)

// health computes the headline from the snapshot built so far and the
// samples: cur the newest, minute and five the samples a minute and five
// minutes back.
func (s *Sampler) health(snap *Snapshot, cur, minute, five *sample, redis, archive []string) Health {
	var rs []Reason
	add := func(code, network, format string, a ...any) {
		rs = append(rs, Reason{Code: code, Network: network, Text: fmt.Sprintf(format, a...)})
	}
	since := func(name string, match map[string]string, from *sample) float64 {
		d := cur.sum(name, match, nil)
		if from != nil {
			d -= from.sum(name, match, nil)
		}
		return d
	}
	for _, n := range snap.Networks {
		up := n.Upstream
		if up.LastFailure != nil && cur.at.Sub(*up.LastFailure) <= recent &&
			(up.LastSuccess == nil || up.LastFailure.After(*up.LastSuccess)) {
			add(ReasonUpstreamDown, n.Name, "network %s: the upstream's last calls failed (%s, at %s), none succeeded since",
				n.Name, up.FailureClass, up.LastFailure.UTC().Format("15:04:05 UTC"))
		}
		if ws := n.WS; ws != nil && ws.Wanted > 0 {
			if ws.Up == 0 {
				add(ReasonStreamDown, n.Name, "network %s: every upstream WebSocket connection is down (%d wanted); the stream carries nothing", n.Name, ws.Wanted)
			} else {
				for _, o := range ws.Origins {
					if o.Up == 0 && o.Wanted > 0 {
						add(ReasonOriginDown, n.Name, "network %s: origin %s is down (0 of %d connections up)", n.Name, originName(o.Origin), o.Wanted)
					}
				}
			}
		}
		for _, e := range n.Budget {
			refused := since(ratelimit.MetricBudgetRefusals, map[string]string{"network": n.Name, "endpoint": e.Endpoint}, minute)
			if e.Use >= budgetSaturatedUse || refused > 0 {
				add(ReasonBudgetSaturated, n.Name, "network %s: the upstream budget of %s is saturated (%.0f %% used over the last minute, %.0f calls refused)",
					n.Name, e.Endpoint, e.Use*100, refused)
			}
		}
		conf := cur.by(MetricBudgetRPS, "endpoint", map[string]string{"network": n.Name})
		eff := cur.by(MetricBudgetEffectiveRPS, "endpoint", map[string]string{"network": n.Name})
		eps := make([]string, 0, len(eff))
		for e := range eff {
			eps = append(eps, e)
		}
		sort.Strings(eps)
		for _, e := range eps {
			if c, ok := conf[e]; ok && eff[e] < c {
				add(ReasonBudgetAdapting, n.Name, "network %s: the upstream budget of %s is adapting: %.3g calls/s in force of %.3g configured",
					n.Name, e, eff[e], c)
			}
		}
		if g := since(MetricGapsUnfilled, map[string]string{"network": n.Name}, five); g > 0 {
			add(ReasonGapUnfilled, n.Name, "network %s: %.0f gaps of the stream were not filled in the last %s", n.Name, g, recent)
		}
	}
	for _, text := range redis {
		add(ReasonRedisBreaker, "", "%s", text)
	}
	if v, ok := cur.value(redisconn.MetricBreakerState, nil); ok && v != 0 && len(redis) == 0 {
		state := "open"
		if v == 1 {
			state = "half-open"
		}
		add(ReasonRedisBreaker, "", "Redis breaker %s: the limits and the replay record fall back to ratelimit.redis.fail_mode", state)
	}
	if v, ok := cur.value(shared.MetricUp, nil); ok && v == 0 {
		add(ReasonSharedCache, "", "the shared cache tier (Redis) does not answer: each replica caches alone")
	}
	for _, text := range archive {
		add(ReasonArchive, "", "%s", text)
	}
	if f := since(proxy.MetricReplayFull, nil, five); f > 0 {
		add(ReasonReplayFull, "", "the replay record was full: %.0f requests got 503 in the last %s (auth.replay_max_entries)", f, recent)
	}
	h := Health{State: StateWell, Reasons: rs}
	if len(rs) > 0 {
		h.State = StateDegraded
	}
	if h.Reasons == nil {
		h.Reasons = []Reason{}
	}
	return h
}

func originName(o string) string {
	if o == "" {
		return "(single origin)"
	}
	return o
}

// Summary is the headline in one line: "all well", or "degraded: " and
// every reason.
func (h Health) Summary() string {
	if h.State == StateWell {
		return "All well"
	}
	texts := make([]string, len(h.Reasons))
	for i, r := range h.Reasons {
		texts[i] = r.Text
	}
	return "Degraded: " + strings.Join(texts, "; ")
}

// value returns the sum of the points of name matching match, and whether
// there was any.
func (smp *sample) value(name string, match map[string]string) (float64, bool) {
	found := false
	var t float64
	for _, p := range smp.points {
		if p.matches(name, match) {
			found = true
			t += p.value
		}
	}
	return t, found
}

// wsEvents notes, per network, the last upstream WebSocket failure (a
// reconnect by reason: drop, stall, refused) seen between the previous
// sample and this one.
func (s *Sampler) wsEvents(cur, prev *sample) {
	delta := map[[2]string]float64{}
	for _, p := range cur.points {
		if p.name == realtime.MetricReconnects {
			delta[[2]string{p.labels["network"], p.labels["reason"]}] += p.value
		}
	}
	if prev != nil {
		for _, p := range prev.points {
			if p.name == realtime.MetricReconnects {
				delta[[2]string{p.labels["network"], p.labels["reason"]}] -= p.value
			}
		}
	}
	keys := make([][2]string, 0, len(delta))
	for k := range delta {
		keys = append(keys, k)
	}
	// The most frequent reason wins; ties by name, for a stable answer.
	sort.Slice(keys, func(i, j int) bool {
		if delta[keys[i]] != delta[keys[j]] {
			return delta[keys[i]] > delta[keys[j]]
		}
		return keys[i][1] < keys[j][1]
	})
	seen := map[string]bool{}
	for _, k := range keys {
		if delta[k] > 0 && !seen[k[0]] {
			seen[k[0]] = true
			s.wsLast[k[0]] = upstreamEvents{failure: cur.at, class: k[1]}
		}
	}
}

// wsUpstream is a network's upstream WebSocket side, from its hub's
// connections and the reconnect counters.
func (s *Sampler) wsUpstream(network string, conns []HubConn, cur *sample) *WSUpstream {
	ws := &WSUpstream{Failures: int64(cur.sum(realtime.MetricReconnects, map[string]string{"network": network}, nil))}
	byOrigin := map[string]*OriginConns{}
	var order []string
	for _, c := range conns {
		o := byOrigin[c.Origin]
		if o == nil {
			o = &OriginConns{Origin: c.Origin}
			byOrigin[c.Origin] = o
			order = append(order, c.Origin)
		}
		o.Wanted++
		ws.Wanted++
		if c.State == "up" {
			o.Up++
			ws.Up++
		}
	}
	sort.Strings(order)
	ws.Origins = []OriginConns{}
	for _, o := range order {
		ws.Origins = append(ws.Origins, *byOrigin[o])
	}
	if e, ok := s.wsLast[network]; ok && !e.failure.IsZero() {
		t := e.failure
		ws.LastFailure, ws.FailureClass = &t, e.class
	}
	return ws
}

// WSUpstream is a network's side of the upstream WebSocket: connections up
// of those wanted, per origin, and the failures (reconnects).
type WSUpstream struct {
	Up           int           `json:"up"`
	Wanted       int           `json:"wanted"`
	Origins      []OriginConns `json:"origins"`
	Failures     int64         `json:"failures"`                     // reconnects: drop, stall, refused
	LastFailure  *time.Time    `json:"last_failure"`                 // to within a sample interval
	FailureClass string        `json:"last_failure_class,omitempty"` // drop, stall or refused
}

// OriginConns are the upstream WebSocket connections to one origin ("":
// the upstream advertises none).
type OriginConns struct {
	Origin string `json:"origin"`
	Up     int    `json:"up"`
	Wanted int    `json:"wanted"`
}
