package config

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap/zapcore"
)

// ISO8601TimeEncoder writes a log line's time exactly as
// zapcore.ISO8601TimeEncoder does ("2006-01-02T15:04:05.000Z0700"), but
// formats it once per millisecond and location: the lines of one
// millisecond share one string. It is safe for concurrent use.
func ISO8601TimeEncoder(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
	ms, loc := t.UnixMilli(), t.Location()
	if c := lastLogTime.Load(); c != nil && c.ms == ms && c.loc == loc {
		enc.AppendString(c.text)
		return
	}
	c := &logTime{ms: ms, loc: loc, text: t.Format(iso8601Layout)}
	lastLogTime.Store(c)
	enc.AppendString(c.text)
}

// iso8601Layout is zapcore.ISO8601TimeEncoder's layout.
const iso8601Layout = "2006-01-02T15:04:05.000Z0700"

type logTime struct {
	ms   int64
	loc  *time.Location
	text string
}

var lastLogTime atomic.Pointer[logTime]
