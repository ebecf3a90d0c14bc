// Package status keeps the facts the admin listener's status page and
// /status.json show. One goroutine, the Sampler's, gathers the Prometheus
// registry the gateway fills anyway every interval (10 s by default) and
// keeps the last 90 samples (15 minutes); rates, ratios, latency quantiles
// and the small time series are computed from the differences between
// samples. The request path is not touched: a page or a JSON answer only
// reads the last snapshot.
//
// Nothing secret is ever gathered: the metrics' labels are network, team,
// endpoint and fixed words, never a key ID, a secret or a signature.
package status

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/proxy"
	"streamgate/ratelimit"
	"streamgate/realtime"
	"streamgate/redisconn"
	"streamgate/wsgate"
)

// Defaults of Options.
const (
	DefaultInterval = 10 * time.Second
	DefaultSamples  = 90 // 15 minutes at the default interval
	latencyWindow   = 5 * time.Minute
)

// TeamInfo is what the configuration says of a team.
type TeamInfo struct {
	Name       string
	DailyQuota int64 // 0: none
	// DailyUsed is the quota's own count today (in Redis: every
	// replica's), when it could be read; nil: unknown.
	DailyUsed *int64
	// Today is the usage ledger's count of the team today (UTC): every
	// replica's with Redis; nil when it could not be read.
	Today *UsageToday
}

// UsageToday is a team's row of the usage ledger for today, over every
// network.
type UsageToday struct {
	Requests      int64 `json:"requests"`
	Reports       int64 `json:"reports"`
	Frames        int64 `json:"frames"`
	UpstreamCalls int64 `json:"upstream_calls"`
	Bytes         int64 `json:"bytes"`
}

// ArchiveState is what the page shows of the archive besides its
// metrics: its backend and the operator's fills.
type ArchiveState struct {
	Backend string        `json:"backend"`
	Open    bool          `json:"open"`
	Fills   []ArchiveFill `json:"fills"`
}

// ArchiveFill is one fill job and its progress.
type ArchiveFill struct {
	ID      string `json:"id"`
	Network string `json:"network"`
	FeedID  string `json:"feed_id"`
	From    uint32 `json:"from"`
	To      uint32 `json:"to"`
	State   string `json:"state"`
	Covered uint64 `json:"covered_seconds"`
	Seconds uint64 `json:"seconds"`
	Pages   int64  `json:"pages"`
	Reports int64  `json:"reports"`
	Error   string `json:"error,omitempty"`
}

// ArchiveStream is one stream the archive holds (archive.Store.Streams),
// with its catalog name when the gateway has the catalog at hand and the
// link to its candle chart on the admin listener.
type ArchiveStream struct {
	Network string `json:"network"`
	FeedID  string `json:"feed_id"`
	Name    string `json:"name,omitempty"`
	// Reports is false when the stream has coverage but no report; First
	// and Last are the oldest and newest report's observationsTimestamp.
	Reports bool   `json:"reports"`
	First   uint32 `json:"first"`
	Last    uint32 `json:"last"`
	Spans   int64  `json:"coverage_spans"`
	Covered uint64 `json:"covered_seconds"`
	// Chart is the path of the stream's candle chart on the admin
	// listener, relative to the status page.
	Chart string `json:"chart"`
}

// NetworkInfo is what the configuration says of a network.
type NetworkInfo struct {
	Name      string
	BudgetRPS float64 // the upstream budget per endpoint
	Hub       func() realtime.Stats
}

// Facts are what the sampler cannot read from the registry: the
// configuration in force and the process's history. Facts is called once
// per sample, from the sampler's goroutine.
type Facts struct {
	Version    string
	LoadedAt   time.Time // when the configuration in force was loaded
	LastReload *Reload   // nil: never reloaded
	MaxBytes   int64
	Networks   []NetworkInfo
	Teams      []TeamInfo
	// Redis says, for each Redis client that cannot use Redis now, why
	// and what follows ("Redis (ratelimit, sentinel) unavailable, …");
	// empty while every client can.
	Redis []string
	// Archive says what is wrong with the archive now ("archive: reads
	// fail (timeout); …"); empty while nothing is, or it is off.
	Archive []string
	// ArchiveState is the archive's backend and fills; nil when it is
	// off.
	ArchiveState *ArchiveState
	// ArchiveStreams are the streams the archive holds, by network and
	// stream ID; nil while it is off or not open.
	ArchiveStreams []ArchiveStream
}

// Reload is the outcome of the last reload.
type Reload struct {
	At    time.Time `json:"at"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// Options configure a Sampler.
type Options struct {
	Gatherer prometheus.Gatherer
	Facts    func() Facts
	Interval time.Duration    // default DefaultInterval
	Samples  int              // ring length; default DefaultSamples
	Now      func() time.Time // default time.Now
}

// Sampler samples the registry in a goroutine of its own, started by Start
// and stopped by Stop, and keeps the latest Snapshot.
type Sampler struct {
	opts Options

	mu   sync.Mutex // ring, day, snap
	ring []sample
	day  dayBase
	last map[string]*upstreamEvents // by network
	// wsLast is the last upstream WebSocket failure, by network.
	wsLast map[string]upstreamEvents
	snap   *Snapshot

	stop    chan struct{}
	done    chan struct{}
	started atomic.Bool
	once    sync.Once
}

type dayBase struct {
	day  int64              // UTC day number of the base
	base map[string]float64 // per team: admitted answers counted before that day began
}

// upstreamEvents are the last upstream success and failure a network saw.
type upstreamEvents struct {
	success, failure time.Time
	class            string
}

// New returns a sampler that has taken its first sample.
func New(opts Options) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Samples < 2 {
		opts.Samples = DefaultSamples
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Facts == nil {
		opts.Facts = func() Facts { return Facts{} }
	}
	s := &Sampler{opts: opts, last: map[string]*upstreamEvents{}, wsLast: map[string]upstreamEvents{},
		stop: make(chan struct{}), done: make(chan struct{})}
	s.Sample()
	return s
}

// Interval is the time between samples.
func (s *Sampler) Interval() time.Duration { return s.opts.Interval }

// Start samples every interval until Stop.
func (s *Sampler) Start() {
	if !s.started.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.Sample()
			}
		}
	}()
}

// Stop ends the goroutine Start started and waits for it. Stop without
// Start returns at once.
func (s *Sampler) Stop() {
	s.once.Do(func() {
		close(s.stop)
		if !s.started.CompareAndSwap(false, true) { // started: wait for it
			<-s.done
		}
	})
}

// Snapshot returns the latest snapshot. It must not be modified.
func (s *Sampler) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// point is one series of a counter, gauge or histogram bucket.
type point struct {
	name   string
	labels map[string]string
	value  float64
}

type sample struct {
	at     time.Time
	points []point
}

// families are the metric families the sampler keeps.
var families = map[string]bool{
	metricArchiveReports:              true,
	metricArchiveDisk:                 true,
	metricArchiveSpans:                true,
	proxy.MetricRequests:              true,
	proxy.MetricCacheResults:          true,
	cache.MetricBytes:                 true,
	proxy.MetricUpstreamRequests:      true,
	proxy.MetricUpstreamErrors:        true,
	proxy.MetricUpstreamDuration:      true,
	proxy.MetricCallsSaved:            true,
	ratelimit.MetricBudgetWaits:       true,
	ratelimit.MetricBudgetRefusals:    true,
	proxy.MetricRateLimitRejections:   true,
	wsgate.MetricWSClients:            true,
	ratelimit.MetricBudgetAdjustments: true,
	shared.MetricFillsSaved:           true,
	shared.MetricUp:                   true,
	redisconn.MetricBreakerState:      true,
	proxy.MetricReplayFull:            true,
	realtime.MetricReconnects:         true,
	MetricBudgetRPS:                   true,
	MetricBudgetEffectiveRPS:          true,
	MetricGapsUnfilled:                true,
	wsgate.MetricWSClientsByOrigin:    true,
	wsgate.MetricWSDrains:             true,
}

// Sample gathers the registry once and computes a new snapshot.
func (s *Sampler) Sample() {
	now := s.opts.Now()
	smp := sample{at: now}
	if s.opts.Gatherer != nil {
		fams, _ := s.opts.Gatherer.Gather() // a partial gather is still worth showing
		for _, f := range fams {
			if !families[f.GetName()] {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				switch {
				case m.Counter != nil:
					smp.points = append(smp.points, point{f.GetName(), labels, m.GetCounter().GetValue()})
				case m.Gauge != nil:
					smp.points = append(smp.points, point{f.GetName(), labels, m.GetGauge().GetValue()})
				case m.Histogram != nil:
					for _, b := range m.GetHistogram().GetBucket() {
						bl := map[string]string{"le": strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)}
						for k, v := range labels {
							bl[k] = v
						}
						smp.points = append(smp.points, point{f.GetName() + "_bucket", bl, float64(b.GetCumulativeCount())})
					}
					smp.points = append(smp.points, point{f.GetName() + "_count", labels, float64(m.GetHistogram().GetSampleCount())})
				}
			}
		}
	}
	facts := s.opts.Facts()

	s.mu.Lock()
	defer s.mu.Unlock()
	var prev *sample
	if len(s.ring) > 0 {
		prev = &s.ring[len(s.ring)-1]
	}
	s.ring = append(s.ring, smp)
	if len(s.ring) > s.opts.Samples {
		s.ring = slices.Delete(s.ring, 0, len(s.ring)-s.opts.Samples)
	}
	s.rollDay(now, prev)
	s.upstreamEvents(&smp, prev)
	s.wsEvents(&smp, prev)
	s.snap = s.build(facts)
}

// rollDay moves the base of "admitted today" at the first sample of a UTC
// day: what the counters held at the previous sample was yesterday's.
func (s *Sampler) rollDay(now time.Time, prev *sample) {
	day := now.UTC().Unix() / 86400
	if s.day.base != nil && s.day.day == day {
		return
	}
	base := map[string]float64{}
	if prev != nil && s.day.base != nil {
		for team, v := range admittedByTeam(*prev) {
			base[team] = v
		}
	}
	s.day = dayBase{day: day, base: base}
}

func admittedByTeam(smp sample) map[string]float64 {
	out := map[string]float64{}
	for _, p := range smp.points {
		if p.name == proxy.MetricRequests && p.labels["code"] != "429" {
			out[p.labels["team"]] += p.value
		}
	}
	return out
}

// upstreamEvents notes, per network, an upstream success or failure seen
// between the previous sample and this one (or before the first sample).
func (s *Sampler) upstreamEvents(cur, prev *sample) {
	type key struct{ network, class string }
	ok := map[string]float64{}
	bad := map[key]float64{}
	add := func(smp *sample, sign float64) {
		for _, p := range smp.points {
			switch p.name {
			case proxy.MetricUpstreamRequests:
				code := p.labels["code"]
				if strings.HasPrefix(code, "2") {
					ok[p.labels["network"]] += sign * p.value
				} else {
					bad[key{p.labels["network"], "http_" + code}] += sign * p.value
				}
			case proxy.MetricUpstreamErrors:
				if r := p.labels["reason"]; r != "canceled" && r != "budget" {
					bad[key{p.labels["network"], r}] += sign * p.value
				}
			}
		}
	}
	add(cur, 1)
	if prev != nil {
		add(prev, -1)
	}
	ev := func(n string) *upstreamEvents {
		if s.last[n] == nil {
			s.last[n] = &upstreamEvents{}
		}
		return s.last[n]
	}
	for n, d := range ok {
		if d > 0 {
			ev(n).success = cur.at
		}
	}
	keys := make([]key, 0, len(bad))
	for k := range bad {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return bad[keys[i]] > bad[keys[j]] }) // the most frequent class wins
	seen := map[string]bool{}
	for _, k := range keys {
		if bad[k] > 0 && !seen[k.network] {
			seen[k.network] = true
			e := ev(k.network)
			e.failure, e.class = cur.at, k.class
		}
	}
}

// sum adds the points of name whose labels match every pair of match.
func (smp *sample) sum(name string, match map[string]string, keep func(map[string]string) bool) float64 {
	var t float64
	for _, p := range smp.points {
		if p.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if p.labels[k] != v {
				ok = false
				break
			}
		}
		if ok && (keep == nil || keep(p.labels)) {
			t += p.value
		}
	}
	return t
}

// by returns, for the points of name matching match, the sums by the value
// of label.
func (smp *sample) by(name, label string, match map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, p := range smp.points {
		if p.matches(name, match) {
			out[p.labels[label]] += p.value
		}
	}
	return out
}

// matches reports whether p is a point of name with every label of match.
func (p *point) matches(name string, match map[string]string) bool {
	if p.name != name {
		return false
	}
	for k, v := range match {
		if p.labels[k] != v {
			return false
		}
	}
	return true
}

// quantile estimates the q-quantile from cumulative bucket deltas, by
// linear interpolation within the bucket as Prometheus does. NaN without
// observations.
func quantile(q float64, bounds, counts []float64) float64 {
	if len(counts) == 0 || counts[len(counts)-1] <= 0 {
		return math.NaN()
	}
	total := counts[len(counts)-1]
	rank := q * total
	lower, below := 0.0, 0.0
	for i, c := range counts {
		if c >= rank {
			if math.IsInf(bounds[i], 1) {
				return lower
			}
			if c == below {
				return bounds[i]
			}
			return lower + (bounds[i]-lower)*(rank-below)/(c-below)
		}
		lower, below = bounds[i], c
	}
	return lower
}

// latency returns p50 and p99 of the upstream calls of network between
// from and to, in seconds (NaN without calls).
func latency(from, to *sample, network string) (p50, p99 float64) {
	type b struct{ le, n float64 }
	agg := map[float64]float64{}
	for _, smp := range []struct {
		s    *sample
		sign float64
	}{{to, 1}, {from, -1}} {
		if smp.s == nil {
			continue
		}
		for _, p := range smp.s.points {
			if p.name != proxy.MetricUpstreamDuration+"_bucket" || p.labels["network"] != network {
				continue
			}
			le, err := strconv.ParseFloat(p.labels["le"], 64)
			if err != nil {
				continue
			}
			agg[le] += smp.sign * p.value
		}
	}
	bs := make([]b, 0, len(agg)+1)
	for le, n := range agg {
		bs = append(bs, b{le, n})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || !math.IsInf(bs[len(bs)-1].le, 1) {
		// The +Inf bucket is implicit in client_golang: its count is _count.
		var n float64
		n = to.sum(proxy.MetricUpstreamDuration+"_count", map[string]string{"network": network}, nil)
		if from != nil {
			n -= from.sum(proxy.MetricUpstreamDuration+"_count", map[string]string{"network": network}, nil)
		}
		bs = append(bs, b{math.Inf(1), n})
	}
	bounds, counts := make([]float64, len(bs)), make([]float64, len(bs))
	for i, x := range bs {
		bounds[i], counts[i] = x.le, x.n
	}
	return quantile(.5, bounds, counts), quantile(.99, bounds, counts)
}
