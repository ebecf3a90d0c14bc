package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// otlpReceiver is a collector's OTLP/HTTP traces endpoint: it keeps the
// spans posted to /v1/traces as application/x-protobuf, and counts posts
// anywhere else.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	wrong []string // paths or content types a collector would refuse
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		o.wrong = append(o.wrong, r.URL.Path+" "+r.Header.Get("Content-Type"))
		http.NotFound(w, r)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		o.wrong = append(o.wrong, "undecodable: "+err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrs(sp *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range sp.Attributes {
		v := kv.Value
		switch {
		case v.GetStringValue() != "":
			m[kv.Key] = v.GetStringValue()
		default:
			m[kv.Key] = fmt.Sprint(v.GetIntValue())
		}
	}
	return m
}

// TestTraceOfAMiss: a report not cached, asked with the client's sampled
// traceparent and a tracestate, makes one trace exported over OTLP/HTTP to
// the collector's /v1/traces: a trace of the gateway's own, whose server
// span (with route, network, team, cache result and status) is linked to
// the client's span, and below it the shared tier, the budget wait and
// the upstream attempt. No span holds a key ID or a secret, nor the
// client's trace ID or tracestate but in the link (its IDs alone); the
// upstream gets no traceparent unless propagate_upstream is on, and then
// the gateway's trace, never the client's IDs nor its tracestate; the
// access log line carries the trace ID and the request duration its
// exemplar.
func TestTraceOfAMiss(t *testing.T) {
	for _, propagate := range []bool{false, true} {
		t.Run(fmt.Sprintf("propagate_upstream=%v", propagate), func(t *testing.T) {
			recv := &otlpReceiver{}
			collector := httptest.NewServer(recv)
			defer collector.Close()
			rs := redistest.New(t)
			var upMu sync.Mutex
			var upstreamTraceparents, upstreamTracestates []string
			core, logs := observer.New(zap.InfoLevel)
			env := servertest.Start(t, servertest.Options{
				Logger: zap.New(core),
				Config: func(c *config.Config) {
					sharedTier(rs)(c)
					c.Tracing = config.Tracing{OTLPEndpoint: collector.URL, Protocol: config.TracingHTTP, SampleRatio: 0, PropagateUpstream: propagate}
				},
				Upstream: func(_ string, h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						upMu.Lock()
						upstreamTraceparents = append(upstreamTraceparents, r.Header.Get("traceparent"))
						upstreamTracestates = append(upstreamTracestates, r.Header.Get("tracestate"))
						upMu.Unlock()
						h.ServeHTTP(w, r)
					})
				},
			})
			btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
			ts := time.Now().Add(-time.Hour).Unix()
			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			const clientState = "client-private-state"
			demo := servertest.Demo()
			req, err := demo.Request(t.Context(), env.Mainnet, fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", btc, ts))
			require.NoError(t, err)
			// Sampled by the client, authenticated: traced although the
			// ratio is 0.
			req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
			req.Header.Set("tracestate", "clientvendor="+clientState)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			// Not sampled and no traceparent: ratio 0, no trace.
			resp2, _ := demo.Get(t, env.Mainnet, "/api/v1/feeds")
			require.Equal(t, http.StatusOK, resp2.StatusCode)

			env.Server.Close() // exports what is pending
			recv.mu.Lock()
			defer recv.mu.Unlock()
			require.Empty(t, recv.wrong, "posts a collector refuses")
			require.NotEmpty(t, recv.spans)
			gatewayTrace := fmt.Sprintf("%x", recv.spans[0].TraceId)
			assert.NotEqual(t, traceID, gatewayTrace, "the gateway's trace is its own")
			byName := map[string]*tracepb.Span{}
			for _, sp := range recv.spans {
				assert.Equal(t, gatewayTrace, fmt.Sprintf("%x", sp.TraceId), "span %s of another trace: the unsampled request was traced", sp.Name)
				assert.NotContains(t, sp.TraceState, clientState, "span %s has the client's tracestate", sp.Name)
				byName[sp.Name] = sp
				for k, v := range attrs(sp) {
					for _, secret := range []string{config.DemoKeyID, config.DemoKeySecret, upstreamsim.OrgKeySecret, upstreamsim.OrgKeyID} {
						assert.NotContains(t, v, secret, "span %s attribute %s", sp.Name, k)
					}
				}
			}

			// The request's duration carries the trace ID as an exemplar.
			mfs, err := env.Registry.Gather()
			require.NoError(t, err)
			exemplar := false
			for _, mf := range mfs {
				if mf.GetName() != "streamgate_request_duration_seconds" {
					continue
				}
				for _, m := range mf.Metric {
					for _, b := range m.GetHistogram().GetBucket() {
						for _, l := range b.GetExemplar().GetLabel() {
							exemplar = exemplar || (l.GetName() == "trace_id" && l.GetValue() == gatewayTrace)
						}
					}
				}
			}
			assert.True(t, exemplar, "no exemplar with the trace ID")

			server := byName["GET /api/v1/reports"]
			require.NotNil(t, server, "server span; got %v", names(recv.spans))
			assert.Equal(t, tracepb.Span_SPAN_KIND_SERVER, server.Kind)
			assert.Empty(t, server.ParentSpanId, "the server span is the root of the gateway's trace")
			require.Len(t, server.Links, 1, "linked to the client's span")
			assert.Equal(t, traceID, fmt.Sprintf("%x", server.Links[0].TraceId))
			assert.Equal(t, parentID, fmt.Sprintf("%x", server.Links[0].SpanId))
			assert.Empty(t, server.Links[0].TraceState, "the client's tracestate is dropped")
			a := attrs(server)
			assert.Equal(t, "/api/v1/reports", a["http.route"])
			assert.Equal(t, "200", a["http.response.status_code"])
			assert.Equal(t, "mainnet", a["streamgate.network"])
			assert.Equal(t, config.DemoTeam, a["streamgate.team"])
			assert.Equal(t, "MISS", a["streamgate.cache"])
			tier := byName["shared tier"]
			require.NotNil(t, tier, "shared tier span; got %v", names(recv.spans))
			assert.Equal(t, server.SpanId, tier.ParentSpanId)
			wait, attempt := byName["budget wait"], byName["upstream attempt"]
			require.NotNil(t, wait)
			require.NotNil(t, attempt)
			assert.Equal(t, tier.SpanId, wait.ParentSpanId, "the budget wait is part of the tier's fill")
			assert.Equal(t, tier.SpanId, attempt.ParentSpanId)
			assert.Equal(t, "200", attrs(attempt)["http.response.status_code"])

			upMu.Lock()
			defer upMu.Unlock()
			sent := strings.Join(upstreamTraceparents, ",")
			assert.NotContains(t, sent, traceID, "the client's trace ID goes upstream")
			assert.NotContains(t, sent, parentID, "the client's span ID goes upstream")
			assert.NotContains(t, strings.Join(upstreamTracestates, ","), clientState, "the client's tracestate goes upstream")
			if propagate {
				assert.Contains(t, sent, "00-"+gatewayTrace+"-"+fmt.Sprintf("%x", attempt.SpanId)+"-01", "the upstream call carries the gateway's trace")
			} else {
				assert.NotContains(t, sent, gatewayTrace, "the upstream is another organisation: no traceparent")
			}
			found := false
			for _, e := range logs.FilterMessage("request").All() {
				if e.ContextMap()["trace_id"] == gatewayTrace {
					found = true
				}
			}
			assert.True(t, found, "the access log line carries the trace ID")
		})
	}
}

func names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestClientSamplingNeedsAuthentication: with sample_ratio 0, a client's
// sampled traceparent makes the gateway trace only a request it
// authenticated. Seven requests, each with a sampled traceparent of its
// own trace: two signed (200), two with a bad signature (401) and one
// unsigned on a signed route (400), one anonymous catalog request (200, unsigned)
// and one of an unknown route (404). Only the two signed ones are
// exported, each in a trace of the gateway's linked to the client's.
func TestClientSamplingNeedsAuthentication(t *testing.T) {
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	env := servertest.Start(t, servertest.Options{
		Config: func(c *config.Config) {
			c.Auth.AnonymousCatalog = true
			c.Tracing = config.Tracing{OTLPEndpoint: collector.URL, Protocol: config.TracingHTTP, SampleRatio: 0}
		},
	})
	demo := servertest.Demo()
	forger := &servertest.Client{Key: config.DemoKeyID, Secret: "not-the-demo-secret-0123456789", HTTP: http.DefaultClient}
	anonymous := &servertest.Client{HTTP: http.DefaultClient}
	cases := []struct {
		client *servertest.Client
		target string
		status int
	}{
		{demo, "/api/v1/feeds", http.StatusOK},
		{forger, "/api/v1/feeds", http.StatusUnauthorized},
		{anonymous, "/api/v1/feeds", http.StatusBadRequest},
		{demo, "/api/v1/feeds", http.StatusOK},
		{forger, "/api/v1/feeds", http.StatusUnauthorized},
		{anonymous, "/api/v1/discovery", http.StatusOK},
		{demo, "/api/v1/no-such-route", http.StatusNotFound},
	}
	var want []string
	for i, c := range cases {
		clientTrace := fmt.Sprintf("%032x", 0xc11e47000+i)
		req, err := c.client.Request(t.Context(), env.Mainnet, c.target)
		require.NoError(t, err)
		req.Header.Set("traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, c.status, resp.StatusCode, "request %d: %s", i, body)
		if c.client == demo && c.status == http.StatusOK {
			want = append(want, clientTrace)
		}
	}
	env.Server.Close() // exports what is pending
	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.Empty(t, recv.wrong, "posts a collector refuses")
	var linked []string
	traces := map[string]bool{}
	for _, sp := range recv.spans {
		if sp.Kind == tracepb.Span_SPAN_KIND_SERVER {
			client := sp.TraceId // a span in the client's trace, as the gateway made them
			if assert.Len(t, sp.Links, 1, "span %s is linked to the client's", sp.Name) {
				client = sp.Links[0].TraceId
			}
			linked = append(linked, fmt.Sprintf("%x", client))
			traces[fmt.Sprintf("%x", sp.TraceId)] = true
		}
	}
	assert.ElementsMatch(t, want, linked, "the traces exported, by the client's trace ID")
	for _, sp := range recv.spans {
		assert.True(t, traces[fmt.Sprintf("%x", sp.TraceId)], "span %s of a trace without a server span", sp.Name)
	}
}
