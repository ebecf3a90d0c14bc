// Package tracing builds the gateway's OpenTelemetry tracer: spans
// sampled by ratio (or by an authenticated client's sampled traceparent),
// batched and exported over OTLP (http/protobuf or grpc) to a collector.
// A request's trace is the gateway's own, linked to the client's span:
// no identifier nor trace state of a client's is in it. Without an
// endpoint it gives nothing, and the request path makes no span at all.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Name is the instrumentation scope of every span of the gateway.
const Name = "streamgate"

// Propagator reads and writes W3C traceparent and tracestate.
var Propagator = propagation.TraceContext{}

// Provider is the tracer of a running gateway. A nil *Provider traces
// nothing.
type Provider struct {
	metrics   *exportMetrics
	tp        *sdktrace.TracerProvider
	tracer    trace.Tracer
	propagate bool
}

// Config is what New needs of the configuration's tracing section.
type Config struct {
	Endpoint          string  // the collector's base URL; "" turns tracing off
	Protocol          string  // "grpc", else http/protobuf
	SampleRatio       float64 // 0 to 1
	PropagateUpstream bool
	Version           string // the service's version on every span
	// Logger receives OpenTelemetry's errors (sampled); nil: none.
	Logger *zap.Logger
	// Registerer receives the streamgate_tracing_* counters; nil: none.
	Registerer prometheus.Registerer
	// ExportTimeout bounds one export, retries included, and each of its
	// attempts; 0: the defaults (30 s, 10 s an attempt).
	ExportTimeout time.Duration
}

// New builds the Provider of cfg, or returns nil when tracing is off.
func New(cfg Config, opts ...sdktrace.TracerProviderOption) (*Provider, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	exp, err := exporter(cfg)
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "streamgate"),
		attribute.String("service.version", cfg.Version),
	)
	// The error handler is the process's (OpenTelemetry has one): the
	// gateway's one Provider sets it to its log.
	m := newExportMetrics(cfg.Registerer)
	otel.SetErrorHandler(newErrorLogger(cfg.Logger, m))
	queued := new(atomic.Int64)
	bo := []sdktrace.BatchSpanProcessorOption{sdktrace.WithMaxQueueSize(maxQueued)}
	if cfg.ExportTimeout > 0 {
		bo = append(bo, sdktrace.WithExportTimeout(cfg.ExportTimeout))
	}
	bsp := sdktrace.NewBatchSpanProcessor(countingExporter{SpanExporter: exp, m: m, queued: queued}, bo...)
	all := append([]sdktrace.TracerProviderOption{
		sdktrace.WithSpanProcessor(boundedProcessor{SpanProcessor: bsp, m: m, queued: queued}),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(newSampler(cfg.SampleRatio)),
	}, opts...)
	tp := sdktrace.NewTracerProvider(all...)
	return &Provider{metrics: m, tp: tp, tracer: tp.Tracer(Name), propagate: cfg.PropagateUpstream}, nil
}

// exporter is the OTLP exporter of cfg. Over http/protobuf the spans go to
// <endpoint>/v1/traces: an exporter given a URL with a path posts to that
// path as it is, so the collector's conventional path is added here.
func exporter(cfg Config) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp_endpoint: %w", err)
	}
	ctx := context.Background()
	switch cfg.Protocol {
	case "grpc":
		o := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(u.Host)}
		if u.Scheme == "http" {
			o = append(o, otlptracegrpc.WithInsecure())
		}
		if cfg.ExportTimeout > 0 {
			o = append(o, otlptracegrpc.WithTimeout(cfg.ExportTimeout))
		}
		return otlptracegrpc.New(ctx, o...)
	default:
		u.Path = strings.TrimRight(u.Path, "/") + "/v1/traces"
		o := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String())}
		if cfg.ExportTimeout > 0 {
			o = append(o, otlptracehttp.WithTimeout(cfg.ExportTimeout))
		}
		return otlptracehttp.New(ctx, o...)
	}
}

// Tracer returns the gateway's tracer; nil for a nil Provider.
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tracer
}

// PropagateUpstream reports whether upstream calls carry a traceparent.
func (p *Provider) PropagateUpstream() bool { return p != nil && p.propagate }

// Shutdown exports what is pending and stops.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// Start starts a child span of the span in ctx when that span is being
// recorded, and returns ctx and a span that does nothing otherwise: a
// request that is not traced makes no span and allocates nothing.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Name).Start(ctx, name, trace.WithAttributes(attrs...))
}

// StartServer starts the server span of a request: the root of a trace
// of the gateway's own, linked to the span of the client's traceparent in
// h when it sent a valid one, by its IDs and flags alone. The client's
// tracestate is dropped, and its trace and span IDs are in no span
// context of the gateway's, so none is exported as the gateway's trace
// nor propagated upstream (tracing.propagate_upstream sends the
// gateway's trace). The client's sampled flag samples the gateway's trace
// whatever the ratio only when authenticated is true: an anonymous
// client, or one whose signature failed, cannot make the gateway trace,
// nor pick a trace ID that the ratio samples (the gateway draws its own).
func StartServer(ctx context.Context, tr trace.Tracer, name string, h http.Header, authenticated bool,
	opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	client := trace.SpanContextFromContext(Propagator.Extract(context.Background(), propagation.HeaderCarrier(h)))
	opts = append(opts, trace.WithNewRoot())
	sctx := ctx
	if client.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: client.WithTraceState(trace.TraceState{})}))
		if authenticated && client.IsSampled() {
			sctx = context.WithValue(ctx, clientSampledKey{}, true)
		}
	}
	_, sp := tr.Start(sctx, name, opts...)
	return trace.ContextWithSpan(ctx, sp), sp
}

// clientSampledKey marks the context a server span is started with when
// an authenticated client sampled its trace (StartServer); the mark is
// not in the context the request's other spans start under.
type clientSampledKey struct{}

// sampler decides when a span starts. A span under one of the gateway's
// own follows it. A root (a request's server span, a stream's backfill)
// is sampled by the ratio of its trace ID, which the gateway drew, or
// when StartServer marked it sampled by an authenticated client. A
// remote parent (a client's) samples nothing by itself: the gateway's
// spans never start under one, and if one did, its flag would count no
// more than the ratio.
func newSampler(ratio float64) sdktrace.Sampler {
	root := rootSampler{ratio: sdktrace.TraceIDRatioBased(ratio)}
	return sdktrace.ParentBased(root,
		sdktrace.WithRemoteParentSampled(root),
		sdktrace.WithRemoteParentNotSampled(root))
}

type rootSampler struct{ ratio sdktrace.Sampler }

func (s rootSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if marked, _ := p.ParentContext.Value(clientSampledKey{}).(bool); marked {
		return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
	}
	return s.ratio.ShouldSample(p)
}

func (s rootSampler) Description() string {
	return "ClientSampledWhenAuthenticated{" + s.ratio.Description() + "}"
}
