package proxy

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"streamgate/tracing"
)

// startServerSpan starts the server span of a request, once, when its
// authentication is known (tracing.StartServer: a trace of the gateway's
// own, linked to the client's traceparent, which samples it only for an
// authenticated request). authenticator starts it for a request it lets
// through, before the rest of the chain, whose spans are its children;
// observe starts it as the request ends for one refused before (a bad
// route, a failed signature), backdated to the request's start. Its
// context becomes the request's: nothing else reads the request's
// context before authenticator lets it through.
func (st *reqState) startServerSpan(r *http.Request, authenticated bool) {
	if st.tracer == nil || st.span != nil {
		return
	}
	var ctx context.Context
	ctx, st.span = tracing.StartServer(st.ctx.Context, st.tracer, r.Method, r.Header, authenticated,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(st.start),
		trace.WithAttributes(attribute.String("http.request.method", r.Method)))
	st.ctx.Context = ctx
}

// endServerSpan names the span for its route and gives it what the
// request learnt: never a key ID, a secret or a query (the stream IDs of
// a bulk request are unbounded).
func endServerSpan(st *reqState) {
	sp := st.span
	if sp.IsRecording() {
		route := st.endpoint
		if st.route != nil {
			route = st.route.path
		}
		sp.SetName(st.method + " " + route)
		attrs := []attribute.KeyValue{
			attribute.String("http.route", route),
			attribute.Int("http.response.status_code", st.status),
			attribute.String("streamgate.network", st.network),
			attribute.String("streamgate.endpoint", st.endpoint),
			attribute.Int("streamgate.upstream_calls", int(st.calls.load())),
		}
		if st.team != "" {
			attrs = append(attrs, attribute.String("streamgate.team", st.team))
		}
		if st.cache != "" {
			attrs = append(attrs, attribute.String("streamgate.cache", st.cache))
		}
		if st.authError != "" {
			attrs = append(attrs, attribute.String("streamgate.auth_error", st.authError))
		}
		sp.SetAttributes(attrs...)
		if st.status >= 500 {
			sp.SetStatus(codes.Error, http.StatusText(st.status))
		}
	}
	sp.End()
}

// traceIDOf returns the trace ID of a sampled span, for an exemplar;
// "" otherwise.
func traceIDOf(sp trace.Span) string {
	if sp == nil {
		return ""
	}
	if sc := sp.SpanContext(); sc.IsSampled() {
		return sc.TraceID().String()
	}
	return ""
}

// endSpan ends a child span, marking it failed with err.
func endSpan(sp trace.Span, err error) {
	if err != nil && sp.IsRecording() {
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}
