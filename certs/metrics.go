package certs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, for the status page and the alert rules.
const (
	MetricExpiry  = "streamgate_tls_certificate_expiry_timestamp_seconds"
	MetricReloads = "streamgate_tls_reloads_total"
	// MetricHandshakeErrors counts failed handshakes by listener and
	// reason (HandshakeReasons).
	MetricHandshakeErrors = "streamgate_tls_handshake_errors_total"
)

// Metrics are the TLS listeners' metrics. A nil *Metrics counts nothing.
type Metrics struct {
	expiryTS *prometheus.GaugeVec
	reloads  *prometheus.CounterVec
	failed   *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		expiryTS: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricExpiry,
			Help: "When the certificate in force on a TLS listener expires (its NotAfter), in seconds since the epoch.",
		}, []string{"listener"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricReloads,
			Help: "Reloads of a TLS listener's files that changed them, by result: loaded, or refused (the set in force stays).",
		}, []string{"listener", "result"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricHandshakeErrors,
			Help: "TLS handshakes that failed on a listener, by reason: plain_http, bad_client_hello, unsupported_version, no_shared_cipher, no_shared_protocol, bad_certificate (the client's), client_alert (the client refused, most often the certificate served), eof, timeout, other.",
		}, []string{"listener", "reason"}),
	}
	reg.MustRegister(m.expiryTS, m.reloads, m.failed)
	return m
}

func (m *Metrics) expiry(listener string, t time.Time) {
	if m != nil {
		m.expiryTS.WithLabelValues(listener).Set(float64(t.Unix()))
	}
}

func (m *Metrics) reload(listener, result string) {
	if m != nil {
		m.reloads.WithLabelValues(listener, result).Inc()
	}
}

// Listener shows every reason of a listener's failed handshakes at 0
// from its start, so that a rate over them starts from there.
func (m *Metrics) Listener(listener string) {
	if m != nil {
		for _, r := range HandshakeReasons {
			m.failed.WithLabelValues(listener, r)
		}
	}
}

// HandshakeFailed counts a failed handshake of listener; reason is one of
// HandshakeReasons.
func (m *Metrics) HandshakeFailed(listener, reason string) {
	if m != nil {
		m.failed.WithLabelValues(listener, reason).Inc()
	}
}
