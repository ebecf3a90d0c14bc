package tracing

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// maxQueued is the most sampled spans ended and not yet exported (queued,
// batched or being sent); a span beyond it is dropped and counted. It is
// the batch processor's queue size, which so never fills: the processor
// drops a span of a full queue without a word.
const maxQueued = sdktrace.DefaultMaxQueueSize

// exportMetrics count what the exporter loses, without labels beyond the
// reason (two values).
type exportMetrics struct {
	failures prometheus.Counter
	dropped  *prometheus.CounterVec // reason: export_failed, queue_full
	errors   prometheus.Counter
}

func newExportMetrics(reg prometheus.Registerer) *exportMetrics {
	m := &exportMetrics{
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "streamgate_tracing_export_failures_total",
			Help: "Exports of a batch of spans to the OTLP collector that failed (after the exporter's retries).",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_tracing_spans_dropped_total",
			Help: "Sampled spans never exported, by reason: export_failed (their batch's export failed) or queue_full (more spans waiting than the queue holds).",
		}, []string{"reason"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "streamgate_tracing_errors_total",
			Help: "Errors OpenTelemetry reported to its error handler (logged, sampled, as \"tracing: error\").",
		}),
	}
	for _, r := range []string{"export_failed", "queue_full"} {
		m.dropped.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.failures, m.dropped, m.errors)
	}
	return m
}

// countingExporter counts the failed exports and their spans, and frees
// their place in the bound of boundedProcessor.
type countingExporter struct {
	sdktrace.SpanExporter
	m      *exportMetrics
	queued *atomic.Int64
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	e.queued.Add(-int64(len(spans)))
	if err != nil {
		e.m.failures.Inc()
		e.m.dropped.WithLabelValues("export_failed").Add(float64(len(spans)))
	}
	return err // the batch processor gives it to the error handler
}

// boundedProcessor is the batch processor behind a bound of its own on
// the sampled spans waiting, so that a span it cannot take is counted.
type boundedProcessor struct {
	sdktrace.SpanProcessor
	m      *exportMetrics
	queued *atomic.Int64
}

func (p boundedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if p.queued.Add(1) > maxQueued {
		p.queued.Add(-1)
		p.m.dropped.WithLabelValues("queue_full").Inc()
		return
	}
	p.SpanProcessor.OnEnd(s)
}

// errorLogger is OpenTelemetry's error handler: the errors it reports
// (a failed export, a collector's partial refusal) go to the gateway's
// JSON log, sampled (the first of a message each 10 s, then one in 100),
// and are counted, instead of a plain-text line on stderr.
type errorLogger struct {
	log *zap.Logger
	m   *exportMetrics
}

func newErrorLogger(log *zap.Logger, m *exportMetrics) errorLogger {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, 10*time.Second, 1, 100)
	}))
	return errorLogger{log: log, m: m}
}

func (h errorLogger) Handle(err error) {
	h.m.errors.Inc()
	h.log.Warn("tracing: error", zap.Error(err))
}

var _ otel.ErrorHandler = errorLogger{}
