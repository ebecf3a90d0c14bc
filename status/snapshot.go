package status

import (
	"math"
	"sort"
	"strings"
	"time"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/proxy"
	"streamgate/ratelimit"
	"streamgate/wsgate"
)

// Snapshot is what the page and /status.json show. Counts are since the
// process started unless the field says otherwise; rates and ratios are
// over the window named in the field. Nothing in it is secret.
type Snapshot struct {
	// Health is the headline: well, or degraded with every reason.
	Health         Health    `json:"health"`
	Version        string    `json:"version"`
	SampledAt      time.Time `json:"sampled_at"`
	SampleInterval float64   `json:"sample_interval_seconds"`
	Window         float64   `json:"window_seconds"` // the time the series cover
	Config         Config    `json:"config"`
	Cache          Cache     `json:"cache"`
	Networks       []Network `json:"networks"`
	Teams          []Team    `json:"teams"`
	// HitRatio is the cache hit ratio per sample interval, oldest first.
	HitRatio []float64 `json:"hit_ratio_series"`
	// FreeShare is Cache.Free.Share per sample interval, oldest first.
	FreeShare []float64 `json:"no_upstream_call_series"`
}

// NoUpstreamCall counts the answers to cache lookups that cost no upstream
// call, by where they came from. Share is their part of all lookups
// (Free / Lookups).
type NoUpstreamCall struct {
	Lookups int64   `json:"lookups"`
	Free    int64   `json:"answers"`
	Share   float64 `json:"share"`
	// Memory: a fresh entry (or a "no data yet" answer) in this replica's
	// memory (X-Cache: HIT).
	Memory int64 `json:"memory"`
	// Shared: a miss in memory filled from the shared tier in Redis, an
	// entry another replica fetched (X-Cache: MISS, no upstream call).
	// Counted for all networks together: 0 per network.
	Shared int64 `json:"shared"`
	// Stream: latest answered from the WebSocket stream (X-Cache: STREAM).
	Stream int64 `json:"stream"`
	// Stale: a held entry past its lifetime, answered while it is
	// refreshed (X-Cache: STALE).
	Stale int64 `json:"stale"`
	// Coalesced: a request that waited for another's upstream call
	// (X-Cache: COALESCED).
	Coalesced int64 `json:"coalesced"`
}

// noUpstreamCall computes the answers free of an upstream call from the
// cache results by result and the fills answered by the shared tier.
func noUpstreamCall(res map[string]float64, shared float64) NoUpstreamCall {
	var lookups float64
	for _, v := range res {
		lookups += v
	}
	shared = math.Max(math.Min(shared, res["miss"]), 0) // a shared-tier fill is a miss in memory
	f := NoUpstreamCall{Lookups: int64(lookups), Memory: int64(res["hit"] + res["negative"]), Shared: int64(shared),
		Stream: int64(res["stream"]), Stale: int64(res["stale"]), Coalesced: int64(res["coalesced"])}
	f.Free = f.Memory + f.Shared + f.Stream + f.Stale + f.Coalesced
	f.Share = ratio(float64(f.Free), lookups)
	return f
}

// Config is the configuration in force.
type Config struct {
	LoadedAt   time.Time `json:"loaded_at"`
	LastReload *Reload   `json:"last_reload"` // null: never reloaded
}

// Cache is the response cache (shared by every network).
type Cache struct {
	BytesUsed int64   `json:"bytes_used"`
	MaxBytes  int64   `json:"max_bytes"`
	Lookups   int64   `json:"lookups"`
	Hits      int64   `json:"hits"` // hit, stale and negative answers
	HitRatio  float64 `json:"hit_ratio"`
	// Free are the answers that cost no upstream call, with their parts.
	Free         NoUpstreamCall `json:"no_upstream_call"`
	StaleServed  int64          `json:"stale_served"`
	CallsSaved   int64          `json:"upstream_calls_saved"`
	Coalesced    int64          `json:"coalesced"`
	WindowHitPct float64        `json:"-"`
}

// Network is one network's upstream, budget and hub.
type Network struct {
	Name       string `json:"name"`
	Requests   int64  `json:"requests"`
	CallsSaved int64  `json:"upstream_calls_saved"`
	// The cache's lookups for this network: hit ratio and stale answers.
	HitRatio    float64        `json:"hit_ratio"`
	StaleServed int64          `json:"stale_served"`
	Free        NoUpstreamCall `json:"no_upstream_call"` // without the shared tier's part
	Upstream    Upstream       `json:"upstream"`
	// WS is the upstream WebSocket side, when the network has a hub.
	WS     *WSUpstream `json:"ws_upstream,omitempty"`
	Budget []Endpoint  `json:"budget"`
	Hub    *Hub        `json:"hub,omitempty"`
	// Series per sample interval, oldest first: requests per second,
	// upstream calls per second, and the busiest endpoint's share of its
	// budget (0..1).
	RequestRate  []float64 `json:"requests_per_second_series"`
	UpstreamRate []float64 `json:"upstream_calls_per_second_series"`
	BudgetUse    []float64 `json:"budget_use_series"`
}

// Upstream is the health of a network's upstream.
type Upstream struct {
	// Calls are the REST calls attempted: answered (any status) or failed
	// without an answer (timeout, transport, integrity); Failures are
	// those not answered 2xx.
	Calls        int64      `json:"calls"`
	Failures     int64      `json:"failures"`
	LastSuccess  *time.Time `json:"last_success"` // to within a sample interval
	LastFailure  *time.Time `json:"last_failure"`
	FailureClass string     `json:"last_failure_class,omitempty"` // timeout, transport, integrity, http_503, …
	P50ms        *float64   `json:"p50_ms"`                       // over the last 5 minutes; null without calls
	P99ms        *float64   `json:"p99_ms"`
}

// Endpoint is the upstream budget of one endpoint.
type Endpoint struct {
	Endpoint string  `json:"endpoint"`
	Calls    int64   `json:"calls"`
	Use      float64 `json:"use"` // calls per second over the last minute / budget rps
	Waits    int64   `json:"waits"`
	Refusals int64   `json:"refusals"`
	Pauses   int64   `json:"upstream_429"` // upstream 429 answers: each pauses the endpoint
	// RPS is the configured budget and EffectiveRPS the rate in force (less
	// after upstream 429s); 0 before the endpoint's first call.
	RPS          float64 `json:"rps"`
	EffectiveRPS float64 `json:"effective_rps"`
	// Slowdowns and Recoveries count the changes of the rate in force.
	Slowdowns  int64 `json:"adjustments_down"`
	Recoveries int64 `json:"adjustments_up"`
}

// Slowed reports whether the endpoint's budget runs below its configured
// rate.
func (e Endpoint) Slowed() bool { return e.EffectiveRPS > 0 && e.EffectiveRPS < e.RPS }

// Hub is a network's real-time hub.
type Hub struct {
	Connections     []HubConn        `json:"connections"`
	FeedsWanted     int              `json:"feeds_wanted"`
	FeedsSubscribed int              `json:"feeds_subscribed"`
	FeedsLive       int              `json:"feeds_live"` // carried by a connection that is up
	FeedsUncarried  int              `json:"feeds_uncarried"`
	Subscribers     int              `json:"subscribers"`
	Clients         int64            `json:"clients"`
	Reconnects      map[string]int64 `json:"reconnects"`
	// ClientsByOrigin are the client connections by the HA origin they
	// named ("none" without).
	ClientsByOrigin map[string]int64 `json:"clients_by_origin,omitempty"`
	// Continuity: (stream, second) pairs of gaps filled over REST and not
	// filled; clients resumed and the reports replayed to them; whether
	// the replica is closing its stream clients in steps (shutdown).
	Backfilled int64 `json:"seconds_backfilled"`
	Unfilled   int64 `json:"seconds_unfilled"`
	Resumed    int64 `json:"clients_resumed"`
	Replayed   int64 `json:"reports_replayed"`
	Draining   bool  `json:"draining"`
	// Share is the stream sharing with the other replicas; nil when the
	// hub does not share.
	Share *HubShare `json:"share,omitempty"`
}

// HubShare is a hub's sharing of its upstream connections through Redis.
type HubShare struct {
	Sharing   bool  `json:"sharing"` // false: Redis fails, own connections
	Held      int   `json:"chunks_held"`
	Published int64 `json:"frames_published"`
	Received  int64 `json:"frames_received"`
	Fallbacks int64 `json:"fallbacks"`
}

// HubConn is one upstream WebSocket connection.
type HubConn struct {
	Origin string `json:"origin"`
	State  string `json:"state"`
	Feeds  int    `json:"feeds"`
}

// Team is one team's traffic.
type Team struct {
	Name        string           `json:"name"`
	Requests    int64            `json:"requests"`
	Answers     map[string]int64 `json:"answers"` // by class: 1xx (WebSocket upgrades), 2xx, 3xx, 4xx, 429, 5xx
	RateLimited int64            `json:"rate_limited"`
	// RateLimitedShare is RateLimited / Requests.
	RateLimitedShare float64 `json:"rate_limited_share"`
	// AdmittedToday counts this replica's answers other than 429 since
	// 00:00 UTC.
	AdmittedToday int64 `json:"admitted_today"`
	DailyQuota    int64 `json:"daily_quota"` // 0: none
	// DailyUsed is the daily quota's own count today, shared by every
	// replica with the redis backend; absent when the team has no quota
	// or it could not be read.
	DailyUsed *int64 `json:"daily_used,omitempty"`
}

// build computes a snapshot from the ring; s.mu is held.
func (s *Sampler) build(f Facts) *Snapshot {
	cur := &s.ring[len(s.ring)-1]
	first := &s.ring[0]
	snap := &Snapshot{
		Version: f.Version, SampledAt: cur.at,
		SampleInterval: s.opts.Interval.Seconds(),
		Window:         cur.at.Sub(first.at).Seconds(),
		Config:         Config{LoadedAt: f.LoadedAt, LastReload: f.LastReload},
	}
	// The sample a minute and five minutes back (or the oldest).
	back := func(d time.Duration) *sample {
		for i := range s.ring {
			if !s.ring[i].at.Before(cur.at.Add(-d)) {
				if i > 0 {
					return &s.ring[i-1]
				}
				return &s.ring[i]
			}
		}
		return first
	}
	minute, five := back(time.Minute), back(latencyWindow)

	// Cache.
	res := cur.by(proxy.MetricCacheResults, "result", nil)
	c := Cache{MaxBytes: f.MaxBytes, BytesUsed: int64(cur.sum(cache.MetricBytes, nil, nil)),
		StaleServed: int64(res["stale"]), Coalesced: int64(res["coalesced"]),
		CallsSaved: int64(cur.sum(proxy.MetricCallsSaved, nil, nil))}
	for r, v := range res {
		c.Lookups += int64(v)
		if isHit(r) {
			c.Hits += int64(v)
		}
	}
	c.HitRatio = ratio(float64(c.Hits), float64(c.Lookups))
	c.Free = noUpstreamCall(res, cur.sum(shared.MetricFillsSaved, nil, nil))
	snap.Cache = c

	// Series, one point per interval between consecutive samples.
	for i := 1; i < len(s.ring); i++ {
		a, b := s.ring[i-1].by(proxy.MetricCacheResults, "result", nil), s.ring[i].by(proxy.MetricCacheResults, "result", nil)
		var hits, all float64
		for r, v := range b {
			d := v - a[r]
			all += d
			if isHit(r) {
				hits += d
			}
		}
		snap.HitRatio = append(snap.HitRatio, ratio(hits, all))
		d := map[string]float64{}
		for r, v := range b {
			d[r] = v - a[r]
		}
		shared := s.ring[i].sum(shared.MetricFillsSaved, nil, nil) - s.ring[i-1].sum(shared.MetricFillsSaved, nil, nil)
		snap.FreeShare = append(snap.FreeShare, noUpstreamCall(d, shared).Share)
	}

	for _, n := range f.Networks {
		match := map[string]string{"network": n.Name}
		net := Network{Name: n.Name,
			Requests:   int64(cur.sum(proxy.MetricRequests, match, nil)),
			CallsSaved: int64(cur.sum(proxy.MetricCallsSaved, match, nil)),
		}
		nres := cur.by(proxy.MetricCacheResults, "result", match)
		var hits, lookups float64
		for r, v := range nres {
			lookups += v
			if isHit(r) {
				hits += v
			}
		}
		net.HitRatio, net.StaleServed = ratio(hits, lookups), int64(nres["stale"])
		net.Free = noUpstreamCall(nres, 0)
		// An integrity failure was answered (counted by its status) but
		// unusable: a failure, not another call.
		unanswered := int64(cur.sum(proxy.MetricUpstreamErrors, match, func(l map[string]string) bool {
			return l["reason"] != "canceled" && l["reason"] != "budget" && l["reason"] != "integrity"
		}))
		up := Upstream{
			Calls: int64(cur.sum(proxy.MetricUpstreamRequests, match, nil)) + unanswered,
			Failures: int64(cur.sum(proxy.MetricUpstreamRequests, match, func(l map[string]string) bool { return !strings.HasPrefix(l["code"], "2") })) +
				int64(cur.sum(proxy.MetricUpstreamErrors, match, func(l map[string]string) bool { return l["reason"] != "canceled" && l["reason"] != "budget" })),
		}
		if e := s.last[n.Name]; e != nil {
			if !e.success.IsZero() {
				t := e.success
				up.LastSuccess = &t
			}
			if !e.failure.IsZero() {
				t := e.failure
				up.LastFailure, up.FailureClass = &t, e.class
			}
		}
		if p50, p99 := latency(five, cur, n.Name); !math.IsNaN(p50) {
			a, b := p50*1000, p99*1000
			up.P50ms, up.P99ms = &a, &b
		}
		net.Upstream = up

		calls := cur.by(proxy.MetricUpstreamRequests, "endpoint", match)
		callsBefore := minute.by(proxy.MetricUpstreamRequests, "endpoint", match)
		pauses := cur.by(proxy.MetricUpstreamRequests, "endpoint", map[string]string{"network": n.Name, "code": "429"})
		waits := cur.by(ratelimit.MetricBudgetWaits, "endpoint", match)
		refusals := cur.by(ratelimit.MetricBudgetRefusals, "endpoint", match)
		rps := cur.by(ratelimit.MetricBudgetRPS, "endpoint", match)
		eff := cur.by(ratelimit.MetricBudgetEffectiveRPS, "endpoint", match)
		downs := cur.by(ratelimit.MetricBudgetAdjustments, "endpoint", map[string]string{"network": n.Name, "direction": "down"})
		ups := cur.by(ratelimit.MetricBudgetAdjustments, "endpoint", map[string]string{"network": n.Name, "direction": "up"})
		eps := map[string]bool{}
		for _, m := range []map[string]float64{calls, waits, refusals, rps} {
			for e := range m {
				eps[e] = true
			}
		}
		span := cur.at.Sub(minute.at).Seconds()
		for e := range eps {
			ep := Endpoint{Endpoint: e, Calls: int64(calls[e]), Waits: int64(waits[e]), Refusals: int64(refusals[e]), Pauses: int64(pauses[e]),
				RPS: rps[e], EffectiveRPS: eff[e], Slowdowns: int64(downs[e]), Recoveries: int64(ups[e])}
			if span > 0 && n.BudgetRPS > 0 {
				ep.Use = (calls[e] - callsBefore[e]) / span / n.BudgetRPS
			}
			net.Budget = append(net.Budget, ep)
		}
		sort.Slice(net.Budget, func(i, j int) bool { return net.Budget[i].Endpoint < net.Budget[j].Endpoint })

		for i := 1; i < len(s.ring); i++ {
			a, b := &s.ring[i-1], &s.ring[i]
			dt := b.at.Sub(a.at).Seconds()
			if dt <= 0 {
				dt = 1
			}
			net.RequestRate = append(net.RequestRate, (b.sum(proxy.MetricRequests, match, nil)-a.sum(proxy.MetricRequests, match, nil))/dt)
			net.UpstreamRate = append(net.UpstreamRate, (b.sum(proxy.MetricUpstreamRequests, match, nil)-a.sum(proxy.MetricUpstreamRequests, match, nil))/dt)
			var use float64
			if n.BudgetRPS > 0 {
				ca, cb := a.by(proxy.MetricUpstreamRequests, "endpoint", match), b.by(proxy.MetricUpstreamRequests, "endpoint", match)
				for e, v := range cb {
					use = math.Max(use, (v-ca[e])/dt/n.BudgetRPS)
				}
			}
			net.BudgetUse = append(net.BudgetUse, use)
		}

		if n.Hub != nil {
			st := n.Hub()
			h := &Hub{FeedsWanted: st.FeedsWanted, FeedsSubscribed: st.FeedsSubscribed, FeedsUncarried: st.FeedsUncarried,
				FeedsLive:   st.FeedsLive,
				Subscribers: st.Subscribers, Reconnects: st.Reconnects,
				Clients:    int64(cur.sum(wsgate.MetricWSClients, match, nil)),
				Backfilled: st.Backfilled, Unfilled: st.Unfilled, Resumed: st.Resumed, Replayed: st.Replayed}
			if v, ok := cur.value(wsgate.MetricWSDrains, nil); ok && v > 0 {
				h.Draining = true
			}
			for o, v := range cur.by(wsgate.MetricWSClientsByOrigin, "origin", match) {
				if v > 0 {
					if h.ClientsByOrigin == nil {
						h.ClientsByOrigin = map[string]int64{}
					}
					h.ClientsByOrigin[o] = int64(v)
				}
			}
			for _, c := range st.Connections {
				h.Connections = append(h.Connections, HubConn{Origin: c.Origin, State: c.State, Feeds: c.Feeds})
			}
			if sh := st.Share; sh != nil {
				h.Share = &HubShare{Sharing: sh.Sharing, Held: sh.Held, Published: sh.Published,
					Received: sh.Received, Fallbacks: sh.Fallbacks}
			}
			net.Hub = h
			net.WS = s.wsUpstream(n.Name, h.Connections, cur)
		}
		snap.Networks = append(snap.Networks, net)
	}

	// Teams: every configured team, and any other label seen (anonymous).
	today := admittedByTeam(*cur)
	byTeam := map[string]*Team{}
	var order []string
	team := func(name string) *Team {
		if t := byTeam[name]; t != nil {
			return t
		}
		t := &Team{Name: name, Answers: map[string]int64{}}
		byTeam[name] = t
		order = append(order, name)
		return t
	}
	for _, ti := range f.Teams {
		t := team(ti.Name)
		t.DailyQuota, t.DailyUsed = ti.DailyQuota, ti.DailyUsed
	}
	for _, p := range cur.points {
		switch p.name {
		case proxy.MetricRequests:
			t := team(p.labels["team"])
			t.Requests += int64(p.value)
			t.Answers[class(p.labels["code"])] += int64(p.value)
		case proxy.MetricRateLimitRejections:
			team(p.labels["team"]).RateLimited += int64(p.value)
		}
	}
	for _, name := range order {
		t := byTeam[name]
		t.RateLimitedShare = ratio(float64(t.RateLimited), float64(t.Requests))
		t.AdmittedToday = int64(today[name] - s.day.base[name])
		snap.Teams = append(snap.Teams, *t)
	}
	snap.Health = s.health(snap, cur, minute, five, f.Redis, f.Archive)
	return snap
}

func isHit(result string) bool { return result == "hit" || result == "stale" || result == "negative" }

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// class is the answer class of a status code: 2xx, 3xx, 4xx, 5xx, with
// 429 apart.
func class(code string) string {
	if code == "429" {
		return "429"
	}
	if len(code) == 3 {
		return code[:1] + "xx"
	}
	return "other"
}
