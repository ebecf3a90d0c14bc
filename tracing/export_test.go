package tracing

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// syncBuffer is a log's output, read while it is written.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestExportFailuresAreLoggedAndCounted: a collector that accepts and
// never reads. The spans ended beyond the queue while the first export
// hangs are dropped and counted (queue_full); the export that times out
// is counted with its spans (export_failed), and OpenTelemetry's error
// reaches the gateway's JSON log, every line of which stays JSON, and no
// plain-text line goes to the standard logger.
func TestExportFailuresAreLoggedAndCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var connsMu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns = append(conns, c) // held, never read
			connsMu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
	}()
	var std syncBuffer
	log.SetOutput(&std)
	defer log.SetOutput(os.Stderr)
	var out syncBuffer
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&out), zap.DebugLevel))
	reg := prometheus.NewRegistry()
	// The export's timeout must outlast the loop below, which fills the
	// queue while the first batch hangs: a timeout that fired meanwhile
	// would free the queue and drop fewer. 15 s is far beyond the loop's
	// few milliseconds even on a starved machine; the failure it then
	// gives is waited for as an event.
	p, err := New(Config{Endpoint: "http://" + ln.Addr().String(), SampleRatio: 1,
		Logger: logger, Registerer: reg, ExportTimeout: 15 * time.Second})
	require.NoError(t, err)
	m := p.metrics

	// The first full batch (512) goes to the collector and hangs there;
	// the queue holds maxQueued spans in all: the rest are dropped.
	const n = maxQueued + 52
	for range n {
		_, sp := p.Tracer().Start(context.Background(), "span")
		sp.End()
	}
	assert.Equal(t, 52.0, testutil.ToFloat64(m.dropped.WithLabelValues("queue_full")), "spans dropped, queue full")

	require.Eventually(t, func() bool { return testutil.ToFloat64(m.failures) >= 1 }, time.Minute, 10*time.Millisecond,
		"the export to a collector that never reads fails")
	assert.GreaterOrEqual(t, testutil.ToFloat64(m.dropped.WithLabelValues("export_failed")), 512.0, "the failed batch's spans")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"msg":"tracing: error"`) }, time.Minute, 10*time.Millisecond,
		"the error in the log")
	assert.GreaterOrEqual(t, testutil.ToFloat64(m.errors), 1.0)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the queue's remaining exports would fail alike
	_ = p.Shutdown(ctx)

	sc := bufio.NewScanner(strings.NewReader(out.String()))
	lines := 0
	for sc.Scan() {
		lines++
		var v map[string]any
		assert.NoError(t, json.Unmarshal(sc.Bytes(), &v), "a log line that is not JSON: %s", sc.Text())
	}
	assert.Positive(t, lines)
	assert.Empty(t, std.String(), "plain-text lines beside the JSON log")

	// The counters are exposed without labels beyond the reason.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		for _, mm := range mf.Metric {
			for _, l := range mm.Label {
				assert.Equal(t, "reason", l.GetName(), "%s", mf.GetName())
			}
		}
	}
	for _, name := range []string{"streamgate_tracing_export_failures_total", "streamgate_tracing_spans_dropped_total", "streamgate_tracing_errors_total"} {
		assert.True(t, names[name], name)
	}
}
