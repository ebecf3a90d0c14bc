package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"streamgate/auth"
)

// Metrics are the gateway's Prometheus metrics. Every label takes values
// from a bounded set: network and team names come from the configuration,
// endpoints and reasons from fixed lists; never a key ID or a stream ID.
// A nil *Metrics records nothing.
type Metrics struct {
	requests          *prometheus.CounterVec
	requestDuration   *prometheus.HistogramVec
	cacheResults      *prometheus.CounterVec
	upstreamCalls     *prometheus.CounterVec
	upstreamDuration  *prometheus.HistogramVec
	upstreamErrors    *prometheus.CounterVec
	upstreamSaved     *prometheus.CounterVec
	coalescedWaiters  prometheus.Histogram
	rateLimited       *prometheus.CounterVec
	authFailures      *prometheus.CounterVec
	clockSkew         prometheus.Histogram
	integrityFailures *prometheus.CounterVec
	replayStoreErrors prometheus.Counter
	credRefused       *prometheus.CounterVec
	replayStats       atomic.Pointer[func() auth.ReplayStats] // set by New
	latestAges        *prometheus.HistogramVec
	latestWaitTimeout *prometheus.CounterVec
	refreshes         *prometheus.CounterVec
	refreshWaits      *prometheus.HistogramVec

	// The children of the request path's vectors, looked up once for each
	// set of label values and kept: a hit costs map lookups, not the
	// hashing and locking of WithLabelValues.
	requestsBy  children[requestLabels, prometheus.Counter]
	durationBy  children[[2]string, prometheus.Observer]
	cacheBy     children[[3]string, prometheus.Counter]
	savedBy     children[[2]string, prometheus.Counter]
	latestAgeBy children[string, prometheus.Observer]
}

type requestLabels struct {
	network, endpoint string
	code              int
	team              string
}

// children keeps the children of a metric vector by their label values.
// Lookups take no lock: the map is replaced, never changed, when a child
// is added. Label values come from bounded sets (see Metrics), and so
// does the map. The zero value is ready to use.
type children[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // serialises additions
}

// get returns the child for k, making it with make the first time.
func (c *children[K, V]) get(k K, make func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := make()
	m := map[K]V{k: next}
	if old != nil {
		for k2, v2 := range *old {
			m[k2] = v2
		}
	}
	c.m.Store(&m)
	return next
}

// Names of the metrics NewMetrics registers that the status page reads
// (status takes them from here: a rename breaks its build, not the page).
const (
	MetricRequests            = "streamgate_requests_total"             // counter; network, endpoint, code, team
	MetricCacheResults        = "streamgate_cache_results_total"        // counter; network, kind, result
	MetricUpstreamRequests    = "streamgate_upstream_requests_total"    // counter; network, endpoint, code
	MetricUpstreamDuration    = "streamgate_upstream_duration_seconds"  // histogram; network, endpoint
	MetricUpstreamErrors      = "streamgate_upstream_errors_total"      // counter; network, endpoint, reason
	MetricCallsSaved          = "streamgate_upstream_calls_saved_total" // counter; network, kind
	MetricRateLimitRejections = "streamgate_ratelimit_rejections_total" // counter; team, limit
	MetricReplayFull          = "streamgate_replay_record_full_total"   // counter
)

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests, Help: "Requests answered, by network, endpoint, status code and team.",
		}, []string{"network", "endpoint", "code", "team"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "streamgate_request_duration_seconds", Help: "Time to answer a request, by network and endpoint.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"network", "endpoint"}),
		cacheResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCacheResults, Help: "Cache lookups by network, kind (catalog, report, latest, page, bulk) and result (hit, miss, stale, coalesced, negative, stream).",
		}, []string{"network", "kind", "result"}),
		upstreamCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricUpstreamRequests, Help: "Upstream calls that got an answer, by network, endpoint and status code.",
		}, []string{"network", "endpoint", "code"}),
		upstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricUpstreamDuration, Help: "Upstream call latency, by network and endpoint.",
			Buckets: prometheus.DefBuckets,
		}, []string{"network", "endpoint"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricUpstreamErrors, Help: "Upstream calls that got no usable answer, by network, endpoint and reason (timeout, transport, canceled, budget, integrity).",
		}, []string{"network", "endpoint", "reason"}),
		upstreamSaved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCallsSaved, Help: "Upstream calls not made thanks to the cache or coalescing, by network and kind.",
		}, []string{"network", "kind"}),
		coalescedWaiters: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "streamgate_coalesced_waiters", Help: "Requests served by one upstream fill.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRateLimitRejections, Help: "Requests refused by a quota, by team and limit (team, key, daily).",
		}, []string{"team", "limit"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_auth_failures_total", Help: "Failed authentications, by network and reason.",
		}, []string{"network", "reason"}),
		clockSkew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "streamgate_client_clock_skew_seconds", Help: "Server time minus the request's timestamp, for signed requests.",
			Buckets: []float64{-10, -5, -2, -1, -.5, -.1, 0, .1, .5, 1, 2, 5, 10},
		}),
		integrityFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_upstream_integrity_failures_total", Help: "Upstream answers refused because they did not match the request, by network and endpoint.",
		}, []string{"network", "endpoint"}),
		replayStoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "streamgate_replay_store_errors_total", Help: "Failed checks of the replay record shared through Redis (the replica's own record decided).",
		}),
		latestAges: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "streamgate_latest_age_seconds", Help: "Age of the latest reports answered (now minus observationsTimestamp), by network.",
			Buckets: []float64{0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 20, 60},
		}, []string{"network"}),
		latestWaitTimeout: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_latest_wait_timeouts_total", Help: "Latest requests with nothing held that got no report within cache.latest_max_wait (503), by network.",
		}, []string{"network"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_latest_refreshes_total", Help: "Scheduled latest refreshes by network, the call that made them (latest, bulk) and result (ok, not_published, budget, upstream_429, upstream_error, error).",
		}, []string{"network", "via", "result"}),
		refreshWaits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "streamgate_latest_refresh_wait_seconds", Help: "Time a latest refresh waited in the queue for the upstream budget, by network.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10},
		}, []string{"network"}),
		credRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_upstream_credential_refused_total", Help: "Upstream answers 401/403 to a credential the gateway signs with (answered 502), by network, credential (network: the network's upstream credential; team: a team's own upstream credential) and team (the team whose own credential it is, else empty): the operator must fix that credential.",
		}, []string{"network", "credential", "team"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.requestDuration, m.cacheResults, m.upstreamCalls, m.upstreamDuration,
			m.upstreamErrors, m.upstreamSaved, m.coalescedWaiters, m.rateLimited, m.authFailures, m.clockSkew, m.integrityFailures,
			m.replayStoreErrors, m.credRefused,
			m.latestAges, m.latestWaitTimeout, m.refreshes, m.refreshWaits,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "streamgate_replay_record_entries", Help: "Signatures held by this replica's replay record (auth.replay_max_entries bounds it).",
			}, m.replayStat(func(s auth.ReplayStats) float64 { return float64(s.Entries) })),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "streamgate_replay_record_bytes", Help: "Approximate memory held by this replica's replay record.",
			}, m.replayStat(func(s auth.ReplayStats) float64 { return float64(s.Bytes) })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: MetricReplayFull, Help: "Requests refused (503) because the replay record was full.",
			}, m.replayStat(func(s auth.ReplayStats) float64 { return float64(s.FullRefusals) })),
		)
	}
	return m
}

// request counts a request and its duration; a traced request's
// duration carries its trace ID as an exemplar (shown when /metrics is
// scraped as OpenMetrics).
func (m *Metrics) request(network, endpoint string, code int, team string, d time.Duration, traceID string) {
	if m == nil {
		return
	}
	if team == "" {
		team = "anonymous"
	}
	m.requestsBy.get(requestLabels{network, endpoint, code, team}, func() prometheus.Counter {
		return m.requests.WithLabelValues(network, endpoint, strconv.Itoa(code), team)
	}).Inc()
	o := m.durationBy.get([2]string{network, endpoint}, func() prometheus.Observer {
		return m.requestDuration.WithLabelValues(network, endpoint)
	})
	if eo, ok := o.(prometheus.ExemplarObserver); ok && traceID != "" {
		eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
		return
	}
	o.Observe(d.Seconds())
}

func (m *Metrics) cacheResult(network, kind, result string) {
	if m != nil {
		m.cacheBy.get([3]string{network, kind, result}, func() prometheus.Counter {
			return m.cacheResults.WithLabelValues(network, kind, result)
		}).Inc()
	}
}

// cacheResultN counts n cache results at once.
func (m *Metrics) cacheResultN(network, kind, result string, n int) {
	if m != nil && n > 0 {
		m.cacheBy.get([3]string{network, kind, result}, func() prometheus.Counter {
			return m.cacheResults.WithLabelValues(network, kind, result)
		}).Add(float64(n))
	}
}

func (m *Metrics) saved(network, kind string) {
	if m != nil {
		m.savedBy.get([2]string{network, kind}, func() prometheus.Counter {
			return m.upstreamSaved.WithLabelValues(network, kind)
		}).Inc()
	}
}

func (m *Metrics) upstreamCall(network, endpoint string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.upstreamCalls.WithLabelValues(network, endpoint, strconv.Itoa(code)).Inc()
	m.upstreamDuration.WithLabelValues(network, endpoint).Observe(d.Seconds())
}

func (m *Metrics) upstreamError(network, endpoint, reason string) {
	if m != nil {
		m.upstreamErrors.WithLabelValues(network, endpoint, reason).Inc()
	}
}

func (m *Metrics) integrity(network, endpoint string) {
	if m != nil {
		m.integrityFailures.WithLabelValues(network, endpoint).Inc()
		m.upstreamErrors.WithLabelValues(network, endpoint, "integrity").Inc()
	}
}

func (m *Metrics) limited(team, limit string) {
	if m != nil {
		m.rateLimited.WithLabelValues(team, limit).Inc()
	}
}

func (m *Metrics) authFailure(network, reason string) {
	if m != nil {
		m.authFailures.WithLabelValues(network, reason).Inc()
	}
}

func (m *Metrics) skew(d time.Duration) {
	if m != nil {
		m.clockSkew.Observe(d.Seconds())
	}
}

// replayRecord makes the replay record's gauges read stats at each scrape.
func (m *Metrics) replayRecord(stats func() auth.ReplayStats) {
	if m != nil {
		m.replayStats.Store(&stats)
	}
}

func (m *Metrics) replayStat(f func(auth.ReplayStats) float64) func() float64 {
	return func() float64 {
		if p := m.replayStats.Load(); p != nil {
			return f((*p)())
		}
		return 0
	}
}

func (m *Metrics) latestAge(network string, seconds int64) {
	if m != nil {
		m.latestAgeBy.get(network, func() prometheus.Observer {
			return m.latestAges.WithLabelValues(network)
		}).Observe(float64(max(seconds, 0)))
	}
}

func (m *Metrics) latestWaitTimedOut(network string) {
	if m != nil {
		m.latestWaitTimeout.WithLabelValues(network).Inc()
	}
}

func (m *Metrics) refresh(network, via, result string) {
	if m != nil {
		m.refreshes.WithLabelValues(network, via, result).Inc()
	}
}

func (m *Metrics) refreshWait(network string, d time.Duration) {
	if m != nil {
		m.refreshWaits.WithLabelValues(network).Observe(d.Seconds())
	}
}

func (m *Metrics) credentialRefused(network, credential, team string) {
	if m != nil {
		m.credRefused.WithLabelValues(network, credential, team).Inc()
	}
}

func (m *Metrics) replayStoreError() {
	if m != nil {
		m.replayStoreErrors.Inc()
	}
}

// Waiters records how many requests one upstream fill served.
func (m *Metrics) Waiters(n int) {
	if m != nil {
		m.coalescedWaiters.Observe(float64(n))
	}
}
