package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// grpcCollector is a collector's OTLP/gRPC trace service.
type grpcCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (c *grpcCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				c.names = append(c.names, sp.Name)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// export makes a traced span and a child through Start, then shuts the
// provider down, which exports them.
func export(t *testing.T, cfg Config) {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	require.NotNil(t, p)
	ctx, root := p.Tracer().Start(context.Background(), "root")
	_, child := Start(ctx, "child")
	child.End()
	root.End()
	require.NoError(t, p.Shutdown(context.Background()))
}

// TestExportOverGRPC: protocol grpc sends the spans to the collector's
// gRPC trace service.
func TestExportOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	c := &grpcCollector{}
	collectortrace.RegisterTraceServiceServer(srv, c)
	go srv.Serve(ln)
	defer srv.Stop()
	export(t, Config{Endpoint: "http://" + ln.Addr().String(), Protocol: "grpc", SampleRatio: 1})
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.ElementsMatch(t, []string{"root", "child"}, c.names)
}

// TestExportOverHTTPUnderAPath: over http/protobuf the spans go to
// <endpoint>/v1/traces, the endpoint's own path kept (a collector behind a
// path prefix).
func TestExportOverHTTPUnderAPath(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	var names []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		_ = proto.Unmarshal(body, &req)
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					names = append(names, sp.Name)
				}
			}
		}
	}))
	defer srv.Close()
	export(t, Config{Endpoint: srv.URL + "/otel/", Protocol: "http/protobuf", SampleRatio: 1})
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"/otel/v1/traces"}, paths)
	assert.ElementsMatch(t, []string{"root", "child"}, names)
}

// TestOff: no endpoint, no provider, and Start makes no span under a
// context without one.
func TestOff(t *testing.T) {
	p, err := New(Config{})
	require.NoError(t, err)
	assert.Nil(t, p)
	assert.Nil(t, p.Tracer())
	assert.False(t, p.PropagateUpstream())
	ctx := context.Background()
	got, sp := Start(ctx, "x")
	assert.Equal(t, ctx, got, "no span, no new context")
	assert.False(t, sp.IsRecording())
	assert.NoError(t, p.Shutdown(ctx))
}
