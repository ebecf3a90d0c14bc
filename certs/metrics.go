package certs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, for the status page and the alert rules.
const (
	MetricExpiry  = "streamgate_tls_certificate_expiry_timestamp_seconds"
	MetricReloads = "streamgate_tls_reloads_total"
)

// Metrics are the TLS listeners' metrics. A nil *Metrics counts nothing.
type Metrics struct {
	expiryTS *prometheus.GaugeVec
	reloads  *prometheus.CounterVec
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
	}
	reg.MustRegister(m.expiryTS, m.reloads)
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
