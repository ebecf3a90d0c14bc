package config

// The OTLP protocols of Tracing.Protocol.
const (
	TracingHTTP = "http/protobuf"
	TracingGRPC = "grpc"
)

// DefaultSampleRatio is Tracing.SampleRatio's default.
const DefaultSampleRatio = 0.01

// Tracing exports a trace of requests to an OpenTelemetry collector over
// OTLP. Off by default (no endpoint). Read at start.
type Tracing struct {
	// OTLPEndpoint is the collector's base URL, such as
	// http://otel-collector:4318 (http/protobuf: spans are posted to
	// <OTLPEndpoint>/v1/traces) or http://otel-collector:4317 (grpc;
	// https:// for TLS). "" (the default) turns tracing off.
	OTLPEndpoint string `yaml:"otlp_endpoint" json:"otlp_endpoint"`
	// Protocol is http/protobuf (the default) or grpc.
	Protocol string `yaml:"protocol" json:"protocol"`
	// SampleRatio is the share of requests traced, 0 to 1, unless an
	// authenticated client's traceparent says its trace is sampled (then
	// it is traced too, in a trace of the gateway's linked to the
	// client's). Default 0.01.
	SampleRatio float64 `yaml:"sample_ratio" json:"sample_ratio"`
	// PropagateUpstream sends the W3C traceparent of the gateway's
	// upstream calls to the upstream: the gateway's own trace, never a
	// client's IDs or tracestate. Default false: the upstream is another
	// organisation.
	PropagateUpstream bool `yaml:"propagate_upstream" json:"propagate_upstream"`
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t.OTLPEndpoint != "" }
