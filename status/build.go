// This file computes a Snapshot from the sampler's ring: build, and one
// function per section of the page (the cache, each network's traffic,
// upstream, budget, series and hub, the teams).

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

// window is the ring as a snapshot reads it: the newest sample, the
// oldest, and those a minute and five minutes back (or the oldest).
type window struct {
	ring                     []sample
	cur, first, minute, five *sample
}

func newWindow(ring []sample) window {
	w := window{ring: ring, cur: &ring[len(ring)-1], first: &ring[0]}
	w.minute, w.five = w.back(time.Minute), w.back(latencyWindow)
	return w
}

// back is the sample d before the newest (the last one at least d older),
// or the oldest.
func (w window) back(d time.Duration) *sample {
	for i := range w.ring {
		if !w.ring[i].at.Before(w.cur.at.Add(-d)) {
			if i > 0 {
				return &w.ring[i-1]
			}
			return &w.ring[i]
		}
	}
	return w.first
}

// build computes a snapshot from the ring; s.mu is held.
func (s *Sampler) build(f Facts) *Snapshot {
	w := newWindow(s.ring)
	snap := &Snapshot{
		Version: f.Version, SampledAt: w.cur.at,
		SampleInterval: s.opts.Interval.Seconds(),
		Window:         w.cur.at.Sub(w.first.at).Seconds(),
		Config:         Config{LoadedAt: f.LoadedAt, LastReload: f.LastReload},
	}
	snap.Cache = w.cache(f.MaxBytes)
	snap.HitRatio, snap.FreeShare = w.cacheSeries()
	for _, n := range f.Networks {
		snap.Networks = append(snap.Networks, s.network(w, n))
	}
	snap.Teams = s.teams(f.Teams, w.cur)
	snap.Archive = archiveSection(f.ArchiveState, f.ArchiveStreams, w.cur)
	snap.Health = s.health(snap, w.cur, w.minute, w.five, f.Redis, f.Archive)
	return snap
}

// cache is the cache section: the lookups' results since start.
func (w window) cache(maxBytes int64) Cache {
	cur := w.cur
	res := cur.by(proxy.MetricCacheResults, "result", nil)
	c := Cache{MaxBytes: maxBytes, BytesUsed: int64(cur.sum(cache.MetricBytes, nil, nil)),
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
	return c
}

// cacheSeries are the cache's hit ratio and share of answers without an
// upstream call, one point per interval between consecutive samples.
func (w window) cacheSeries() (hitRatio, freeShare []float64) {
	for i := 1; i < len(w.ring); i++ {
		a, b := w.ring[i-1].by(proxy.MetricCacheResults, "result", nil), w.ring[i].by(proxy.MetricCacheResults, "result", nil)
		var hits, all float64
		for r, v := range b {
			d := v - a[r]
			all += d
			if isHit(r) {
				hits += d
			}
		}
		hitRatio = append(hitRatio, ratio(hits, all))
		d := map[string]float64{}
		for r, v := range b {
			d[r] = v - a[r]
		}
		shared := w.ring[i].sum(shared.MetricFillsSaved, nil, nil) - w.ring[i-1].sum(shared.MetricFillsSaved, nil, nil)
		freeShare = append(freeShare, noUpstreamCall(d, shared).Share)
	}
	return hitRatio, freeShare
}

// network is one network's section: its traffic, upstream, budget, series
// and hub.
func (s *Sampler) network(w window, n NetworkInfo) Network {
	net := w.traffic(n.Name)
	net.Upstream = w.upstream(n.Name, s.last[n.Name])
	net.Budget = w.budget(n)
	net.RequestRate, net.UpstreamRate, net.BudgetUse = w.networkSeries(n)
	if n.Hub != nil {
		net.Hub = w.hub(n)
		net.WS = s.wsUpstream(n.Name, net.Hub.Connections, w.cur)
	}
	return net
}

// traffic is a network's requests and cache lookups since start.
func (w window) traffic(network string) Network {
	cur, match := w.cur, map[string]string{"network": network}
	net := Network{Name: network,
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
	return net
}

// upstream is a network's upstream health: its calls and failures, the
// last success and failure (e, nil when none was seen), the latency
// quantiles of the last five minutes.
func (w window) upstream(network string, e *upstreamEvents) Upstream {
	cur, match := w.cur, map[string]string{"network": network}
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
	if e != nil {
		if !e.success.IsZero() {
			t := e.success
			up.LastSuccess = &t
		}
		if !e.failure.IsZero() {
			t := e.failure
			up.LastFailure, up.FailureClass = &t, e.class
		}
	}
	if p50, p99 := latency(w.five, cur, network); !math.IsNaN(p50) {
		a, b := p50*1000, p99*1000
		up.P50ms, up.P99ms = &a, &b
	}
	return up
}

// budget is a network's upstream budget per endpoint, by endpoint name:
// its calls, waits, refusals, pauses, rates, adjustments, and its use over
// the last minute.
func (w window) budget(n NetworkInfo) []Endpoint {
	cur, match := w.cur, map[string]string{"network": n.Name}
	calls := cur.by(proxy.MetricUpstreamRequests, "endpoint", match)
	callsBefore := w.minute.by(proxy.MetricUpstreamRequests, "endpoint", match)
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
	span := cur.at.Sub(w.minute.at).Seconds()
	var out []Endpoint
	for e := range eps {
		ep := Endpoint{Endpoint: e, Calls: int64(calls[e]), Waits: int64(waits[e]), Refusals: int64(refusals[e]), Pauses: int64(pauses[e]),
			RPS: rps[e], EffectiveRPS: eff[e], Slowdowns: int64(downs[e]), Recoveries: int64(ups[e])}
		if span > 0 && n.BudgetRPS > 0 {
			ep.Use = (calls[e] - callsBefore[e]) / span / n.BudgetRPS
		}
		out = append(out, ep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Endpoint < out[j].Endpoint })
	return out
}

// networkSeries are a network's request rate, upstream call rate and
// budget use (its busiest endpoint's), one point per interval between
// consecutive samples.
func (w window) networkSeries(n NetworkInfo) (requests, upstream, budgetUse []float64) {
	match := map[string]string{"network": n.Name}
	for i := 1; i < len(w.ring); i++ {
		a, b := &w.ring[i-1], &w.ring[i]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			dt = 1
		}
		requests = append(requests, (b.sum(proxy.MetricRequests, match, nil)-a.sum(proxy.MetricRequests, match, nil))/dt)
		upstream = append(upstream, (b.sum(proxy.MetricUpstreamRequests, match, nil)-a.sum(proxy.MetricUpstreamRequests, match, nil))/dt)
		var use float64
		if n.BudgetRPS > 0 {
			ca, cb := a.by(proxy.MetricUpstreamRequests, "endpoint", match), b.by(proxy.MetricUpstreamRequests, "endpoint", match)
			for e, v := range cb {
				use = math.Max(use, (v-ca[e])/dt/n.BudgetRPS)
			}
		}
		budgetUse = append(budgetUse, use)
	}
	return requests, upstream, budgetUse
}

// hub is a network's real-time hub (n.Hub is not nil): its feeds,
// subscribers, clients by origin, upstream connections and sharing.
func (w window) hub(n NetworkInfo) *Hub {
	cur, match := w.cur, map[string]string{"network": n.Name}
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
	return h
}

// teams is the teams section: every configured team, and any other label
// seen (anonymous), in that order.
func (s *Sampler) teams(configured []TeamInfo, cur *sample) []Team {
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
	for _, ti := range configured {
		t := team(ti.Name)
		t.DailyQuota, t.DailyUsed, t.Today = ti.DailyQuota, ti.DailyUsed, ti.Today
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
	var out []Team
	for _, name := range order {
		t := byTeam[name]
		t.RateLimitedShare = ratio(float64(t.RateLimited), float64(t.Requests))
		t.AdmittedToday = int64(today[name] - s.day.base[name])
		out = append(out, *t)
	}
	return out
}

// The archive's gauges (archive.Metrics).
const (
	metricArchiveReports = "streamgate_archive_reports"
	metricArchiveDisk    = "streamgate_archive_disk_bytes"
	metricArchiveSpans   = "streamgate_archive_coverage_spans"
)

// archiveSection is the archive's state with what its gauges say; nil
// when it is off.
func archiveSection(st *ArchiveState, streams []ArchiveStream, cur *sample) *Archive {
	if st == nil {
		return nil
	}
	a := &Archive{ArchiveState: *st}
	if a.Fills == nil {
		a.Fills = []ArchiveFill{}
	}
	a.Streams = streams
	if a.Streams == nil {
		a.Streams = []ArchiveStream{}
	}
	a.Reports = int64(cur.sum(metricArchiveReports, nil, nil))
	a.BytesOnDisk = int64(cur.sum(metricArchiveDisk, nil, nil))
	a.Spans = int64(cur.sum(metricArchiveSpans, nil, nil))
	return a
}
