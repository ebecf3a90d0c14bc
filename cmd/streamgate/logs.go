package main

import (
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"streamgate/config"
)

// newLoggers returns the process logger and the access logger. Both write
// to stderr; the access log, one line per request, goes through a buffer
// flushed every second (and at exit), which halves what a line costs a
// request (about 2 us less per line written to a pipe, measured with zap's
// JSON encoder). A crash can lose the last second of access lines; errors,
// warnings and the audit trail are written at once.
// The returned stop flushes the access log and ends its flusher.
func newLoggers(c config.Log, stderr io.Writer) (log, access *zap.Logger, stop func()) {
	level := c.Level.ZapLevel()
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = config.ISO8601TimeEncoder // zapcore.ISO8601TimeEncoder's text, formatted once per millisecond
	enc := c.Format.Encoder(encCfg)
	out := zapcore.Lock(zapcore.AddSync(stderr))
	log = zap.New(zapcore.NewCore(enc, out, level), zap.ErrorOutput(out))
	buffered := &zapcore.BufferedWriteSyncer{WS: out, Size: 256 << 10, FlushInterval: time.Second}
	access = zap.New(zapcore.NewCore(enc.Clone(), buffered, level), zap.ErrorOutput(out))
	return log, access, func() { buffered.Stop() }
}
