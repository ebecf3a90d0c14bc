package server

import (
	"io"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"streamgate/certs"
	"streamgate/config"
)

// NewLoggers returns the process logger and the access logger that c
// describes, for Options.Logger and Options.AccessLog. Both write to w;
// the access log, one line per request, goes through a buffer flushed
// every second (and by stop), which halves what a line costs a request
// (about 2 us less per line written to a pipe, measured with zap's JSON
// encoder). A crash can lose the last second of access lines; errors,
// warnings and the audit trail are written at once.
// The returned stop flushes the access log and ends its flusher.
func NewLoggers(c config.Log, w io.Writer) (log, access *zap.Logger, stop func()) {
	enc := c.Format.Encoder(EncoderConfig())
	out := zapcore.Lock(zapcore.AddSync(w))
	level := c.Level.ZapLevel()
	log = zap.New(zapcore.NewCore(enc, out, level), zap.ErrorOutput(out))
	buffered := &zapcore.BufferedWriteSyncer{WS: out, Size: 256 << 10, FlushInterval: time.Second}
	access = zap.New(zapcore.NewCore(enc.Clone(), buffered, level), zap.ErrorOutput(out))
	return log, access, func() { buffered.Stop() }
}

// NewLogger returns a logger of c's level and format with the encoding
// NewLoggers gives the process logger, writing to ws as it is (unlocked,
// unbuffered): for the load tool and benchmarks, which measure what a log
// line costs, with zapcore.AddSync(io.Discard).
func NewLogger(c config.Log, ws zapcore.WriteSyncer) *zap.Logger {
	return zap.New(zapcore.NewCore(c.Format.Encoder(EncoderConfig()), ws, c.Level.ZapLevel()))
}

// EncoderConfig is zap's production encoder configuration with ISO 8601
// times, each encoder made from it formatting a time once per
// millisecond (newTimeEncoder).
func EncoderConfig() zapcore.EncoderConfig {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = newTimeEncoder()
	return cfg
}

// newTimeEncoder returns a zapcore.TimeEncoder that writes a log line's
// time exactly as zapcore.ISO8601TimeEncoder does
// ("2006-01-02T15:04:05.000Z0700"), but formats it once per millisecond
// and location: the lines of one millisecond share one string. The last
// string is the encoder's own (no state outside it); it is safe for
// concurrent use.
func newTimeEncoder() zapcore.TimeEncoder {
	var last atomic.Pointer[logTime]
	return func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
		ms, loc := t.UnixMilli(), t.Location()
		if c := last.Load(); c != nil && c.ms == ms && c.loc == loc {
			enc.AppendString(c.text)
			return
		}
		c := &logTime{ms: ms, loc: loc, text: t.Format(iso8601Layout)}
		last.Store(c)
		enc.AppendString(c.text)
	}
}

// iso8601Layout is zapcore.ISO8601TimeEncoder's layout.
const iso8601Layout = "2006-01-02T15:04:05.000Z0700"

type logTime struct {
	ms   int64
	loc  *time.Location
	text string
}

// errorLogInterval is how often a cause of the HTTP servers' error log
// gets a line: the first of each interval is written, the rest counted
// and written as one line at its end.
const errorLogInterval = 10 * time.Second

// errorLogCauses bounds how many causes the error log tells apart; a line
// of any further one counts as "other".
const errorLogCauses = 64

// errorLog is the ErrorLog of a listener's http.Server (net/http writes
// to it a line per failed TLS handshake, per panic of a handler, per
// failed Accept, and HTTP/2's complaints), sent to the process log with
// sampling: one client sending bad handshakes as fast as it can would
// otherwise write a line for each (160,000 in 5 s, 32 MB). Each line of
// a cause opens an interval in which that cause's further lines are
// counted, not written; at its end one line says how many ("suppressed"),
// and so does the next line of the cause. A failed handshake is also
// counted by reason (certs.HandshakeReason), every one, unsampled.
type errorLog struct {
	log      *zap.Logger
	failed   func(reason string) // counts a failed handshake; nil on a plain listener
	interval time.Duration

	mu     sync.Mutex
	causes map[string]*logCause
	closed bool
}

// logCause is the state of one cause of the error log.
type logCause struct {
	level      zapcore.Level
	msg        string
	fields     []zap.Field // what names the cause
	until      time.Time   // end of the interval its last written line opened
	suppressed int         // lines not written since its last line
	flush      *time.Timer // writes the count at the interval's end
}

// newErrorLog returns the error log of a listener, writing to log.
func newErrorLog(log *zap.Logger, failed func(reason string), interval time.Duration) *errorLog {
	return &errorLog{log: log, failed: failed, interval: interval, causes: map[string]*logCause{}}
}

// Logger returns the *log.Logger for http.Server.ErrorLog.
func (e *errorLog) Logger() *log.Logger { return log.New(e, "", 0) }

// handshakePrefix begins net/http's line for a failed TLS handshake; the
// client's address and the error follow, separated by ": ".
const handshakePrefix = "http: TLS handshake error from "

// Write takes one line of net/http's (log.Logger writes each line once).
func (e *errorLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	if rest, ok := strings.CutPrefix(line, handshakePrefix); ok {
		remote, text, _ := strings.Cut(rest, ": ")
		reason := certs.HandshakeReason(text)
		if e.failed != nil {
			e.failed(reason)
		}
		e.event("tls:"+reason, zapcore.InfoLevel, "TLS handshake failed", []zap.Field{zap.String("reason", reason)},
			zap.String("remote", remote), zap.String("error", text))
		return len(p), nil
	}
	cause, level := errorCause(line)
	e.event(cause, level, "HTTP server error", []zap.Field{zap.String("cause", cause)}, zap.String("error", line))
	return len(p), nil
}

// errorCause names the cause of a line of net/http's error log other than
// a failed handshake: its text up to the first address, number or " from "
// ("http: panic serving", "http: Accept error: accept tcp",
// "http2: server: error reading preface"), and its level (a handler's
// panic is an error).
func errorCause(line string) (string, zapcore.Level) {
	cause := line
	if i := strings.Index(cause, " from "); i >= 0 {
		cause = cause[:i]
	}
	if i := strings.IndexAny(cause, "0123456789[\n"); i >= 0 {
		cause = cause[:i]
	}
	cause = strings.TrimRight(cause, " :;,")
	if len(cause) > 80 {
		cause = cause[:80]
	}
	if strings.Contains(line, "panic serving") {
		return cause, zapcore.ErrorLevel
	}
	return cause, zapcore.WarnLevel
}

// event writes a line of cause key, or counts it when a line of that
// cause was written less than an interval ago.
func (e *errorLog) event(key string, level zapcore.Level, msg string, named []zap.Field, detail ...zap.Field) {
	now := time.Now()
	e.mu.Lock()
	c := e.causes[key]
	if c == nil {
		if len(e.causes) >= errorLogCauses {
			key, named = "other", []zap.Field{zap.String("cause", "other")}
			c = e.causes[key]
		}
		if c == nil {
			c = &logCause{level: level, msg: msg, fields: named}
			e.causes[key] = c
		}
	}
	if now.Before(c.until) && !e.closed {
		c.suppressed++
		if c.flush == nil {
			c.flush = time.AfterFunc(c.until.Sub(now), func() { e.flushCause(key) })
		}
		e.mu.Unlock()
		return
	}
	n := c.suppressed
	c.suppressed, c.until = 0, now.Add(e.interval)
	if c.flush != nil {
		c.flush.Stop()
		c.flush = nil
	}
	e.mu.Unlock()
	fields := append(append(append([]zap.Field{}, named...), detail...), zap.Int("suppressed", n))
	if ce := e.log.Check(level, msg); ce != nil {
		ce.Write(fields...)
	}
}

// flushCause writes how many lines of cause key were not written, if any.
func (e *errorLog) flushCause(key string) {
	e.mu.Lock()
	c := e.causes[key]
	n := c.suppressed
	c.suppressed, c.flush = 0, nil
	e.mu.Unlock()
	e.writeSuppressed(c, n)
}

func (e *errorLog) writeSuppressed(c *logCause, n int) {
	if n == 0 {
		return
	}
	fields := append(append([]zap.Field{}, c.fields...), zap.Int("suppressed", n), zap.Duration("interval", e.interval))
	if ce := e.log.Check(c.level, c.msg+": repeats not logged"); ce != nil {
		ce.Write(fields...)
	}
}

// Close writes the counts still pending; from then on every line is
// written (a server shutting down writes few).
func (e *errorLog) Close() {
	e.mu.Lock()
	e.closed = true
	pending := map[*logCause]int{}
	for _, c := range e.causes {
		if c.flush != nil {
			c.flush.Stop()
			c.flush = nil
		}
		if c.suppressed > 0 {
			pending[c] = c.suppressed
			c.suppressed = 0
		}
	}
	e.mu.Unlock()
	for c, n := range pending {
		e.writeSuppressed(c, n)
	}
}
