package wsgate

import "github.com/prometheus/client_golang/prometheus"

// The names of the endpoint's metrics that the status page reads.
const (
	MetricWSClients         = "streamgate_ws_clients"            // gauge; network
	MetricWSClientsByOrigin = "streamgate_ws_clients_by_origin"  // gauge; network, origin
	MetricWSDrains          = "streamgate_ws_drains_in_progress" // gauge
)

// Metrics are the endpoint's Prometheus metrics. Every label takes values
// from a bounded set: network names and origins come from the
// configuration, reasons from fixed lists; never a key ID or a stream ID.
// A nil *Metrics records nothing.
type Metrics struct {
	wsClients         *prometheus.GaugeVec
	wsClientsByOrigin *prometheus.GaugeVec
	wsDrains          prometheus.Gauge
	wsClientCloses    *prometheus.CounterVec
	wsRefusals        *prometheus.CounterVec
	wsStopped         *prometheus.CounterVec
	resumeDropped     *prometheus.CounterVec
	resumeRecords     prometheus.Gauge
	resumeUnreads     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		wsClients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricWSClients, Help: "Client WebSocket connections open, by network.",
		}, []string{"network"}),
		wsClientsByOrigin: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricWSClientsByOrigin, Help: "Client WebSocket connections open, by network and the HA origin the client named (X-Cll-Origin; none without).",
		}, []string{"network", "origin"}),
		wsDrains: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricWSDrains, Help: "1 while this replica closes its stream clients in steps (shutdown, realtime.drain_delay passed).",
		}),
		wsClientCloses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_ws_client_closes_total", Help: "Client WebSocket connections ended, by network and reason (client, slow, ping, write, shutdown, drain: closed in steps while the replica shuts down, revoked: a reload took the key, team or network away, flood: more than 10 frames a second from the client).",
		}, []string{"network", "reason"}),
		wsRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_ws_client_refusals_total", Help: "Client WebSocket upgrades refused after authentication, by network and reason (team_limit; upstream_budget: the upstream connections cannot carry the streams asked for, 503).",
		}, []string{"network", "reason"}),
		wsStopped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_ws_client_streams_stopped_total", Help: "Streams of open client WebSocket connections stopped by a reload that took them from the team's feeds, by network.",
		}, []string{"network"}),
		resumeDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_ws_resume_records_dropped_total", Help: "Resume records of stream clients that left this replica on their own, dropped to stay within its bounds, by reason (team: realtime.resume_records_per_team, total: realtime.resume_records); such a client starts live.",
		}, []string{"reason"}),
		resumeRecords: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "streamgate_ws_resume_records", Help: "Stream clients' resume records this replica keeps (in memory, or in Redis with the shared limits): those of clients that left it on their own within realtime.resume_records, besides those of its open connections and of the clients its drain moved.",
		}),
		resumeUnreads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_ws_resume_unread_total", Help: "Stream clients whose resume record could not be read when they connected (Redis did not answer within a second), by network: each got the reports of the last 10 seconds (at most realtime.resume_window) before live ones, at least once; the seconds its record, once read, shows it missed before them are counted in streamgate_ws_gaps_unfilled_total.",
		}, []string{"network"}),
	}
	if reg != nil {
		reg.MustRegister(m.wsClients, m.wsClientsByOrigin, m.wsDrains, m.wsClientCloses, m.wsRefusals, m.wsStopped,
			m.resumeDropped, m.resumeRecords, m.resumeUnreads)
	}
	return m
}

func (m *Metrics) wsClient(network, origin string, delta float64) {
	if m != nil {
		m.wsClients.WithLabelValues(network).Add(delta)
		if origin == "" {
			origin = "none"
		}
		m.wsClientsByOrigin.WithLabelValues(network, origin).Add(delta)
	}
}

func (m *Metrics) wsDrain(delta float64) {
	if m != nil {
		m.wsDrains.Add(delta)
	}
}

func (m *Metrics) wsClosed(network, reason string) {
	if m != nil {
		m.wsClientCloses.WithLabelValues(network, reason).Inc()
	}
}

func (m *Metrics) wsStreamsStopped(network string, n int) {
	if m != nil {
		m.wsStopped.WithLabelValues(network).Add(float64(n))
	}
}

func (m *Metrics) resumeRecordDropped(reason string) {
	if m != nil {
		m.resumeDropped.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) resumeUnread(network string) {
	if m != nil {
		m.resumeUnreads.WithLabelValues(network).Inc()
	}
}

func (m *Metrics) resumeRecordsKept(n int) {
	if m != nil {
		m.resumeRecords.Set(float64(n))
	}
}

func (m *Metrics) wsRefused(network, reason string) {
	if m != nil {
		m.wsRefusals.WithLabelValues(network, reason).Inc()
	}
}
