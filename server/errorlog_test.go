package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestErrorLogSampledPanics: the error log samples every cause, not the
// failed handshakes only: a handler that panics on each of 30 requests
// gets one error line with the panic (net/http's "http: panic serving
// ADDR: …" and its stack), and the other 29 are counted. With an interval
// the test never reaches, the count is written when the log is closed;
// with a short one, at each interval's end, by itself: either way the
// lines and the counts they carry add up to the panics.
func TestErrorLogSampledPanics(t *testing.T) {
	for _, c := range []struct {
		name     string
		interval time.Duration
	}{{"closed before the interval ends", time.Hour}, {"intervals ending", 5 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			el := newErrorLog(zap.New(core), nil, c.interval)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
			srv.Config.ErrorLog = el.Logger()
			srv.Start()
			defer srv.Close()
			const n = 30
			for range n {
				resp, err := http.Get(srv.URL)
				if err == nil { // net/http drops the connection of a panic
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			total := func() (lines, panics int) {
				for _, e := range logs.All() {
					lines++
					f := e.ContextMap()
					require.Equal(t, "http: panic serving", f["cause"], "%v", f)
					require.Equal(t, zapcore.ErrorLevel, e.Level)
					panics += int(f["suppressed"].(int64))
					if e.Message == "HTTP server error" {
						panics++
						require.Contains(t, f["error"], "boom")
					}
				}
				return lines, panics
			}
			if c.interval == time.Hour {
				// Every panic is logged before its connection closes.
				require.Eventually(t, func() bool { _, p := total(); return p == 1 }, 10*time.Second, 5*time.Millisecond)
				require.Equal(t, 1, logs.Len(), "one line: the others wait for the interval's end")
				srv.Close() // the panics' lines are all written
				el.Close()
				lines, panics := total()
				assert.Equal(t, 2, lines)
				assert.Equal(t, n, panics)
				assert.Equal(t, "HTTP server error: repeats not logged", logs.All()[1].Message)
				return
			}
			require.Eventually(t, func() bool { _, p := total(); return p == n }, 10*time.Second, 5*time.Millisecond,
				"the counts are written at each interval's end")
			lines, _ := total()
			t.Logf("%d panics, %d lines", n, lines)
		})
	}
}
