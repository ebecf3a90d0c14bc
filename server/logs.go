package server

import (
	"io"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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
