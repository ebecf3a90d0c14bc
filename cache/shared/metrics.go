package shared

import "github.com/prometheus/client_golang/prometheus"

// Metrics holds the shared tier's Prometheus collectors. Create it once with
// NewMetrics. A nil *Metrics records nothing.
//
// Labels are fixed words only: never a key, a URL or a password.
type Metrics struct {
	lookups   *prometheus.CounterVec // result
	writes    *prometheus.CounterVec // result
	leaseWait *prometheus.CounterVec // outcome
	saved     prometheus.Counter
	up        prometheus.Gauge
	changes   *prometheus.CounterVec // to
}

// Values of the "result" label of streamgate_cache_shared_lookups_total.
const (
	LookupHit     = "hit"     // a valid, fresh entry was read
	LookupMiss    = "miss"    // no entry (or one no longer fresh)
	LookupError   = "error"   // Redis failed or the breaker is open
	LookupCorrupt = "corrupt" // an entry failed its checks; it was dropped
)

// Values of the "outcome" label of streamgate_cache_shared_lease_waits_total.
const (
	WaitValue    = "value"    // the holder's entry arrived
	WaitTakeover = "takeover" // the lease ended without an entry (holder failed or died); this replica filled
	WaitTimeout  = "timeout"  // waited the bound; this replica filled without the lease
	WaitError    = "error"    // Redis failed while waiting; this replica filled
)

// Names of the metrics NewMetrics registers that the status page reads
// (status takes them from here: a rename breaks its build, not the page).
const (
	MetricFillsSaved = "streamgate_cache_shared_fills_saved_total" // counter
	MetricUp         = "streamgate_cache_shared_up"                // gauge: 1 up, 0 down
)

// NewMetrics creates the collectors and registers them with reg:
//
//	streamgate_cache_shared_lookups_total{result}      hit, miss, error, corrupt
//	streamgate_cache_shared_writes_total{result}       ok, error, too_large
//	streamgate_cache_shared_lease_waits_total{outcome} value, takeover, timeout, error
//	streamgate_cache_shared_fills_saved_total
//	streamgate_cache_shared_up
//	streamgate_cache_shared_transitions_total{to}      up, down
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_cache_shared_lookups_total",
			Help: "Lookups in the shared cache tier (Redis) after a miss in memory, by result: hit, miss, error (Redis failed or its breaker is open), corrupt (an entry failed its checks and was dropped).",
		}, []string{"result"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_cache_shared_writes_total",
			Help: "Entries written to the shared cache tier, by result: ok, error, too_large (above cache.shared.max_entry_bytes, kept in memory only).",
		}, []string{"result"}),
		leaseWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_cache_shared_lease_waits_total",
			Help: "Misses that found another replica filling the key and waited, by outcome: value (its entry arrived), takeover (its lease ended without one; this replica filled), timeout, error.",
		}, []string{"outcome"}),
		saved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricFillsSaved,
			Help: "Fills answered from the shared cache tier (an entry another replica fetched) instead of the upstream.",
		}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricUp,
			Help: "1 while the shared cache tier answers, 0 while each replica falls back to its memory and the upstream.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_cache_shared_transitions_total",
			Help: "Changes of the shared cache tier's availability, by the state entered (up, down).",
		}, []string{"to"}),
	}
	for _, r := range []string{LookupHit, LookupMiss, LookupError, LookupCorrupt} {
		m.lookups.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error", "too_large"} {
		m.writes.WithLabelValues(r)
	}
	for _, o := range []string{WaitValue, WaitTakeover, WaitTimeout, WaitError} {
		m.leaseWait.WithLabelValues(o)
	}
	m.changes.WithLabelValues("up")
	m.changes.WithLabelValues("down")
	m.up.Set(1)
	for _, c := range []prometheus.Collector{m.lookups, m.writes, m.leaseWait, m.saved, m.up, m.changes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) lookup(result string) {
	if m != nil {
		m.lookups.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) write(result string) {
	if m != nil {
		m.writes.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) waited(outcome string) {
	if m != nil {
		m.leaseWait.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) fillSaved() {
	if m != nil {
		m.saved.Inc()
	}
}

func (m *Metrics) available(up bool) {
	if m == nil {
		return
	}
	if up {
		m.up.Set(1)
		m.changes.WithLabelValues("up").Inc()
	} else {
		m.up.Set(0)
		m.changes.WithLabelValues("down").Inc()
	}
}
