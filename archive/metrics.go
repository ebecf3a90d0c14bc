package archive

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the archive's metrics, streamgate_archive_*, registered on
// the registry given to NewMetrics. No label names a stream. A nil
// *Metrics counts nothing.
type Metrics struct {
	written    prometheus.Counter
	duplicates prometheus.Counter
	dropped    *prometheus.CounterVec
	lag        prometheus.Histogram
	batch      prometheus.Histogram
	errors     *prometheus.CounterVec
	reads      *prometheus.CounterVec
	reports    prometheus.Gauge
	disk       prometheus.Gauge
	spans      prometheus.Gauge
	retention  *prometheus.CounterVec
}

// Reasons a report is dropped (the label reason of
// streamgate_archive_dropped_total).
const (
	DropQueueFull  = "queue_full"  // the Writer's queue was full
	DropStoreError = "store_error" // the store failed the batch, retries included
	DropClosed     = "closed"      // added after Close
	DropInvalid    = "invalid"     // not a report a store takes (no network, a stream ID not canonical, no fullReport)
)

// NewMetrics registers the archive's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "streamgate_archive_reports_written_total", Help: "Reports stored in the archive.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "streamgate_archive_duplicates_total", Help: "Reports skipped because the archive held them already.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_archive_dropped_total", Help: "Reports the Writer did not store, by reason: queue_full, store_error, closed, invalid. Each is a coverage hole.",
		}, []string{"reason"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "streamgate_archive_write_lag_seconds", Help: "Time from a report's Add to its batch's commit.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "streamgate_archive_batch_size", Help: "Reports per batch the Writer wrote.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_archive_errors_total", Help: "Failed store calls by operation and kind: timeout, unavailable, auth, canceled, other.",
		}, []string{"op", "kind"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_archive_reads_total", Help: "Reports asked of the archive by result: hit, miss, error.",
		}, []string{"result"}),
		reports: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "streamgate_archive_reports", Help: "Reports the archive holds, at the last Stats.",
		}),
		disk: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "streamgate_archive_disk_bytes", Help: "Bytes the archive takes on disk (Pebble: its files; PostgreSQL: its tables and indexes), at the last Stats.",
		}),
		spans: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "streamgate_archive_coverage_spans", Help: "Coverage spans the archive holds, at the last Stats.",
		}),
		retention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_archive_retention_deleted_total", Help: "What retention deleted: reports, spans (deleted or cut at the cutoff).",
		}, []string{"what"}),
	}
	for _, c := range []prometheus.Collector{m.written, m.duplicates, m.dropped, m.lag, m.batch,
		m.errors, m.reads, m.reports, m.disk, m.spans, m.retention} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{DropQueueFull, DropStoreError, DropClosed, DropInvalid} {
		m.dropped.WithLabelValues(r)
	}
	for _, r := range []string{"hit", "miss", "error"} {
		m.reads.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) wrote(r WriteResult) {
	if m == nil {
		return
	}
	m.written.Add(float64(r.Written))
	m.duplicates.Add(float64(r.Duplicates))
}

func (m *Metrics) drop(reason string, n int) {
	if m != nil {
		m.dropped.WithLabelValues(reason).Add(float64(n))
	}
}

func (m *Metrics) failed(op string, err error) {
	if m != nil {
		m.errors.WithLabelValues(op, ErrorKind(err)).Inc()
	}
}

// read counts the reports asked (n) and found (hit) by a read, or its
// error.
func (m *Metrics) read(n, hit int, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reads.WithLabelValues("error").Add(float64(max(n, 1)))
		return
	}
	m.reads.WithLabelValues("hit").Add(float64(hit))
	m.reads.WithLabelValues("miss").Add(float64(n - hit))
}

func (m *Metrics) stats(s Stats) {
	if m != nil {
		m.reports.Set(float64(s.Reports))
		m.disk.Set(float64(s.BytesOnDisk))
		m.spans.Set(float64(s.Spans))
	}
}

func (m *Metrics) deleted(d Deleted) {
	if m != nil {
		m.retention.WithLabelValues("reports").Add(float64(d.Reports))
		m.retention.WithLabelValues("spans").Add(float64(d.Spans))
	}
}

// ErrorKind classifies a store's error for the metrics: timeout (a
// deadline passed), canceled, unavailable (the server cannot be reached,
// the connection broke, or the server is shutting down or starting),
// auth (PostgreSQL refused the user or its password), other.
func ErrorKind(err error) string {
	var ne net.Error
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &pe):
		// Class 08: connection exception; 57P0x: the server is shutting
		// down or starting; 53: out of resources.
		if len(pe.Code) >= 4 && (pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:4] == "57P0") {
			return "unavailable"
		}
		if len(pe.Code) >= 2 && pe.Code[:2] == "28" { // invalid authorization
			return "auth"
		}
		return "other"
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err):
		return "unavailable"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &ne):
		return "unavailable"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return "unavailable"
	}
	return "other"
}
