package redisconn

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// Metric names the status page and the tests read.
const (
	// MetricBreakerState is the state of a client's circuit breaker
	// (gauge; label client): 0 closed, 1 half-open, 2 open.
	MetricBreakerState = "streamgate_redis_breaker_state"
	// MetricBreakerTransitions counts the changes of state of a client's
	// circuit breaker (counter; labels client, to: closed, half-open,
	// open).
	MetricBreakerTransitions = "streamgate_redis_breaker_transitions_total"
	// MetricCommands counts the commands a client sent (counter; label
	// client), those of pipelines and transactions each.
	MetricCommands = "streamgate_redis_commands_total"
	// MetricRoundTrips counts a client's calls (counter; label client):
	// one command, or one pipeline or transaction, each one round trip
	// to Redis unless the library retries or follows a redirect.
	MetricRoundTrips = "streamgate_redis_round_trips_total"
	// MetricCommandErrors counts a client's failed calls by kind (counter;
	// labels client, kind): see the Kind constants.
	MetricCommandErrors = "streamgate_redis_command_errors_total"
	// MetricFailovers counts the changes of master a client saw (counter;
	// label client): a Sentinel failover, a cluster slot range served by
	// another node.
	MetricFailovers = "streamgate_redis_failovers_total"
	// MetricMode is 1 for a client's mode (gauge; labels client, mode:
	// single, sentinel, cluster).
	MetricMode = "streamgate_redis_mode"
)

// Metrics are the collectors of every Redis client of the process. Create
// them once with NewMetrics and pass them to each New through
// Options.Metrics; a nil *Metrics records nothing. Label values are the
// clients' names (Options.Name), modes, kinds and breaker states: never
// an address or a password.
type Metrics struct {
	mode               *prometheus.GaugeVec   // client, mode
	commands           *prometheus.CounterVec // client
	roundTrips         *prometheus.CounterVec // client
	errors             *prometheus.CounterVec // client, kind
	failovers          *prometheus.CounterVec // client
	breakerState       *prometheus.GaugeVec   // client
	breakerTransitions *prometheus.CounterVec // client, to
	breakerRejections  *prometheus.CounterVec // client
}

// NewMetrics creates the collectors and registers them with reg:
//
//	streamgate_redis_mode{client,mode}
//	streamgate_redis_commands_total{client}
//	streamgate_redis_round_trips_total{client}
//	streamgate_redis_command_errors_total{client,kind}
//	streamgate_redis_failovers_total{client}
//	streamgate_redis_breaker_state{client}
//	streamgate_redis_breaker_transitions_total{client,to}
//	streamgate_redis_breaker_rejected_total{client}
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricMode, Help: "1 for the mode of each Redis client: single, sentinel or cluster.",
		}, []string{"client", "mode"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCommands, Help: "Redis commands sent, each of a pipeline or transaction counted.",
		}, []string{"client"}),
		roundTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRoundTrips, Help: "Redis calls (a command, or a pipeline or transaction), each one round trip unless retried or redirected.",
		}, []string{"client"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCommandErrors, Help: "Failed Redis calls by kind: timeout, connection, circuit_open, readonly, loading, clusterdown, masterdown, tryagain, moved, ask, crossslot, reply, other.",
		}, []string{"client", "kind"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricFailovers, Help: "Changes of master a Redis client saw: a Sentinel failover, or a cluster slot range now served by another node.",
		}, []string{"client"}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricBreakerState,
			Help: "State of a Redis client's circuit breaker: 0 closed (calls go to Redis), 1 half-open (one probe goes), 2 open (calls fail at once and the users fall back).",
		}, []string{"client"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBreakerTransitions,
			Help: "Transitions of a Redis client's circuit breaker, by the state entered (closed, half-open, open).",
		}, []string{"client", "to"}),
		breakerRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_redis_breaker_rejected_total",
			Help: "Redis calls failed at once by a client's circuit breaker, without waiting for Redis.",
		}, []string{"client"}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.mode, m.commands, m.roundTrips, m.errors, m.failovers,
		m.breakerState, m.breakerTransitions, m.breakerRejections} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// clientMetrics are the collectors of one client, looked up once; the zero
// value records nothing.
type clientMetrics struct {
	commands, roundTrips, failovers, rejections prometheus.Counter
	errors                                      map[string]prometheus.Counter
	state                                       prometheus.Gauge
	transitions                                 map[gobreaker.State]prometheus.Counter
}

func (m *Metrics) client(name string, mode Mode) *clientMetrics {
	if m == nil {
		return &clientMetrics{}
	}
	m.mode.WithLabelValues(name, string(mode)).Set(1)
	cm := &clientMetrics{
		commands:    m.commands.WithLabelValues(name),
		roundTrips:  m.roundTrips.WithLabelValues(name),
		failovers:   m.failovers.WithLabelValues(name),
		rejections:  m.breakerRejections.WithLabelValues(name),
		errors:      map[string]prometheus.Counter{},
		state:       m.breakerState.WithLabelValues(name),
		transitions: map[gobreaker.State]prometheus.Counter{},
	}
	for _, k := range kinds {
		cm.errors[k] = m.errors.WithLabelValues(name, k)
	}
	for _, s := range []gobreaker.State{gobreaker.StateClosed, gobreaker.StateHalfOpen, gobreaker.StateOpen} {
		cm.transitions[s] = m.breakerTransitions.WithLabelValues(name, s.String())
	}
	return cm
}

func (m *clientMetrics) sent(commands int) {
	if m.commands != nil {
		m.commands.Add(float64(commands))
		m.roundTrips.Inc()
	}
}

func (m *clientMetrics) failed(kind string) {
	if m.errors != nil {
		m.errors[kind].Inc()
	}
}

func (m *clientMetrics) failover() {
	if m.failovers != nil {
		m.failovers.Inc()
	}
}

func (m *clientMetrics) breakerChanged(to gobreaker.State) {
	if m.state != nil {
		m.state.Set(float64(to))
		m.transitions[to].Inc()
	}
}

func (m *clientMetrics) breakerRejected() {
	if m.rejections != nil {
		m.rejections.Inc()
	}
}
