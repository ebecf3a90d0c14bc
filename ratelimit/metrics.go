package ratelimit

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the package's Prometheus collectors. Create it once with
// NewMetrics and pass it to every constructor through Options.Metrics. A nil
// *Metrics records nothing.
//
// Label values come from Options.Name, Options.Network, budget keys (which
// name upstream endpoints) and fixed words; never from teams' key ids or
// anything secret.
type Metrics struct {
	decisions      *prometheus.CounterVec   // limiter, result
	budgetWaits    *prometheus.CounterVec   // network, endpoint
	budgetRefusals *prometheus.CounterVec   // network, endpoint
	budgetWait     *prometheus.HistogramVec // network
	budgetRPS      *prometheus.GaugeVec     // network, endpoint
	budgetEff      *prometheus.GaugeVec     // network, endpoint
	budgetAdjusts  *prometheus.CounterVec   // network, endpoint, direction
	redisErrors    *prometheus.CounterVec   // op
	fallbacks      *prometheus.CounterVec   // mode
}

// Values of the "result" label of streamgate_ratelimit_decisions_total.
const (
	ResultAllowed = "allowed"
	ResultRefused = "refused"
	ResultError   = "error" // ErrUnavailable, ErrInvalidLimit, a cancelled context
)

// Names of the metrics NewMetrics registers that the status page reads
// (status takes them from here: a rename breaks its build, not the page).
const (
	MetricBudgetWaits        = "streamgate_upstream_budget_waits_total"       // counter; network, endpoint
	MetricBudgetRefusals     = "streamgate_upstream_budget_refusals_total"    // counter; network, endpoint
	MetricBudgetRPS          = "streamgate_upstream_budget_rps"               // gauge; network, endpoint: as configured
	MetricBudgetEffectiveRPS = "streamgate_upstream_budget_effective_rps"     // gauge; network, endpoint: in force
	MetricBudgetAdjustments  = "streamgate_upstream_budget_adjustments_total" // counter; network, endpoint, direction
)

// NewMetrics creates the collectors and registers them with reg:
//
//	streamgate_ratelimit_decisions_total{limiter,result}
//	streamgate_upstream_budget_waits_total{network,endpoint}
//	streamgate_upstream_budget_refusals_total{network,endpoint}
//	streamgate_upstream_budget_wait_seconds{network}
//	streamgate_upstream_budget_rps{network,endpoint}
//	streamgate_upstream_budget_effective_rps{network,endpoint}
//	streamgate_upstream_budget_adjustments_total{network,endpoint,direction}
//	streamgate_redis_errors_total{op}
//	streamgate_redis_fallbacks_total{mode}
//
// The Redis clients' own metrics (commands, round trips, errors by kind,
// failovers, the circuit breaker) are package redisconn's.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_ratelimit_decisions_total",
			Help: "Rate limit and quota decisions, by limiter and result (allowed, refused, error).",
		}, []string{"limiter", "result"}),
		budgetWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBudgetWaits,
			Help: "Upstream calls that had to wait for the upstream budget.",
		}, []string{"network", "endpoint"}),
		budgetRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBudgetRefusals,
			Help: "Upstream calls refused because the budget had no token within their deadline.",
		}, []string{"network", "endpoint"}),
		budgetWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "streamgate_upstream_budget_wait_seconds",
			Help:    "Time upstream calls waited for the upstream budget before going ahead (0 when a token was there).",
			Buckets: []float64{0, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"network"}),
		budgetRPS: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricBudgetRPS,
			Help: "The configured upstream budget: calls per second allowed per endpoint.",
		}, []string{"network", "endpoint"}),
		budgetEff: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricBudgetEffectiveRPS,
			Help: "The upstream budget in force: the configured rate, or less after upstream 429s (it halves after one, then recovers step by step).",
		}, []string{"network", "endpoint"}),
		budgetAdjusts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBudgetAdjustments,
			Help: "Changes of the upstream budget in force, by direction (down: after an upstream 429; up: a step of recovery).",
		}, []string{"network", "endpoint", "direction"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_redis_errors_total",
			Help: "Failed Redis operations of the rate limiters, by operation.",
		}, []string{"op"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_redis_fallbacks_total",
			Help: "Requests decided without Redis, by fail mode (open: by local limits; closed: refused).",
		}, []string{"mode"}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.decisions, m.budgetWaits, m.budgetRefusals, m.budgetWait, m.budgetRPS, m.budgetEff, m.budgetAdjusts, m.redisErrors, m.fallbacks} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// decisionCounters are the counters of one limiter, looked up once.
type decisionCounters struct {
	allowed, refused, failed prometheus.Counter
}

func (m *Metrics) decisionCounters(limiter string) decisionCounters {
	if m == nil {
		return decisionCounters{}
	}
	return decisionCounters{
		allowed: m.decisions.WithLabelValues(limiter, ResultAllowed),
		refused: m.decisions.WithLabelValues(limiter, ResultRefused),
		failed:  m.decisions.WithLabelValues(limiter, ResultError),
	}
}

func (c decisionCounters) record(d Decision, err error) {
	if c.allowed == nil {
		return
	}
	switch {
	case err != nil:
		c.failed.Inc()
	case d.Allowed:
		c.allowed.Inc()
	default:
		c.refused.Inc()
	}
}

func (m *Metrics) redisError(op string) {
	if m != nil {
		m.redisErrors.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) fallback(mode FailMode) {
	if m != nil {
		m.fallbacks.WithLabelValues(mode.String()).Inc()
	}
}

func (m *Metrics) budgetGranted(network, endpoint string, waited time.Duration) {
	if m == nil {
		return
	}
	if waited > 0 {
		m.budgetWaits.WithLabelValues(network, endpoint).Inc()
	}
	m.budgetWait.WithLabelValues(network).Observe(waited.Seconds())
}

func (m *Metrics) budgetRefused(network, endpoint string) {
	if m != nil {
		m.budgetRefusals.WithLabelValues(network, endpoint).Inc()
	}
}

// budgetRates sets the gauges of the configured rate and the rate in force
// of a limited key.
func (m *Metrics) budgetRates(network, endpoint string, rate, eff float64) {
	if m != nil && rate > 0 {
		m.budgetRPS.WithLabelValues(network, endpoint).Set(rate)
		m.budgetEff.WithLabelValues(network, endpoint).Set(eff)
	}
}

func (m *Metrics) budgetAdjusted(network, endpoint, dir string) {
	if m != nil {
		m.budgetAdjusts.WithLabelValues(network, endpoint, dir).Inc()
	}
}
